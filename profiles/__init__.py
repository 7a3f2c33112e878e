"""Profiling of actions over a configuration grid, and the shipped profile tables."""
