"""The CodeAct sandbox: ``parent`` (Sandbox, the parent side), ``child`` (the interpreter, run by path),
and its boundary (``bwrap`` with ``interpreter``, what it binds; ``seccomp_filter``, ``landlock``, ``cgroup``,
``procs``); its link-safe workspace I/O is ``earthrl.envs.data.workspace_fs``."""
