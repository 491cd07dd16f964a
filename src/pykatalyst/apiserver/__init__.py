"""The embedded API server: `MemoryCluster` (`apiserver/memory.py`), a versioned store with a
strategy per kind, the admission chain and after-commit hooks, built as kube-apiserver's
registry is; its HTTP face (`apiserver/http.py`) with discovery, kubectl tables and watch
streams; and the stand-in kubelet that finishes pod deletions where no kubelet runs.

Only what runs a server imports this package (the runtime, the simulator, the command line
and tests); the components reach any cluster through `pykatalyst.cluster`."""
