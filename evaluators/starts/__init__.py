"""A search's start from ``torch.compile``, generated once per machine in a process of its own
and cached."""
