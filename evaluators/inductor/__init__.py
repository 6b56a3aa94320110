"""Inductor's generated code for a task's reference, read and rewritten as a kernel of a
language (C++ or Triton): what a start from ``torch.compile`` is made of."""
