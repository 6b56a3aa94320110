"""The runner's confinement by the operating system (namespaces, Landlock, seccomp) and how a
runner that died is described to whoever wrote the kernel."""
