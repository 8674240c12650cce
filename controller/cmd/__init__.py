"""Programs: `torchrun-controller` (main.py)."""
