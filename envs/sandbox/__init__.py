"""The CodeAct sandbox: ``parent`` (Sandbox, the parent side), ``child`` (the interpreter, run by path),
its boundary (``bwrap``, ``seccomp_filter``, ``landlock``, ``cgroup``, ``procs``), link-safe workspace
access (``workspace_fs``) and its start-up/exec benchmark (``bench``)."""
