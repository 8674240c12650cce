"""Programs: `torchrun-controller` (main.py), its command line parsed and checked in options.py."""
