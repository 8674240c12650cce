"""The TorchrunJob controller: launch building, pure manifest builders, status logic, the
reconciler and its per-job updaters."""
