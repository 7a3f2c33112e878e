"""Helpers shared by the action modules (packed into every action's zip by actions/package.py)."""
