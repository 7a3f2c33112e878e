import os

# One onnxruntime thread per session keeps the suite predictable on small CI machines.
os.environ.setdefault("ESG_ACTION_THREADS", "1")
