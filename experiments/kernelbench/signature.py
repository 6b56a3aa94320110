"""The part of a KernelBench task's ``task.py`` that prints the cpp entry point: each
parameter's C declaration with its sizes or value (``c_signature()``), and the names in order
for a wrong result's message (``WRONG_RESULT_HINT``). Text appended to
kernelbench_template.TASK_PY; it uses that file's ``_FIRST``, ``_SCALARS`` and ``_C_TYPES``.
"""

SIGNATURE_PY = '''
def _parameter_names(function, count, prefix):
    parameters = list(inspect.signature(function).parameters.values())[1:]
    named = [p.name for p in parameters
             if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return [named[i] if i < len(named) else f"{prefix}{i}" for i in range(count)]


def _parameters():
    """(C declaration, comment) of every parameter of the entry point, in order."""
    rows, offset = [], 0

    def tensor(name, dims, dtype, role):
        nonlocal offset
        where = {0: "no sizes", 1: f"sizes[{offset}]"}.get(
            len(dims), f"sizes[{offset}..{offset + len(dims) - 1}]")
        offset += len(dims)
        const = "" if role == "output" else "const "
        rows.append((f"{const}{_C_TYPES.get(dtype, 'void')}* {name}",
                     f"{role} {name}: {where} = {dims}"))

    def scalars(name, entry, role):
        if entry["kind"] in _SCALARS:
            rows.append((f"{_SCALARS[entry['kind']][1]} {name}",
                         f"{role} {name}: {entry['kind']}, {entry['value']!r} here"))
        elif entry["kind"] == "ints":
            for j, v in enumerate(entry["value"]):
                rows.append((f"int64_t {name}_{j}", f"{role} {name}[{j}]: {v} here"))
        else:  # a comment line only: the kernel is not given it
            shown = entry.get("repr", "None")
            rows.append(("", f"{role} {name} = {shown}: not passed"))

    args, init = _FIRST["args"], _FIRST["init"]
    for name, entry in zip(_parameter_names(_problem.Model.forward, len(args), "in"), args):
        if entry["kind"] == "tensor":
            tensor(name, entry["shape"], entry["dtype"], "input")
        else:
            scalars(name, entry, "input")
    for name, entry in zip(_parameter_names(_problem.Model.__init__, len(init), "init"), init):
        scalars(name, entry, "setting")
    for entry in _FIRST["state"]:
        tensor(entry["name"].replace(".", "_"), entry["shape"], entry["dtype"], "parameter")
    for i, entry in enumerate(_FIRST["outputs"]):
        tensor(f"out{i}", entry["shape"], entry["dtype"], "output")
    return rows


def c_signature():
    """The cpp entry point for this problem, each parameter commented with its sizes or value."""
    rows = _parameters()
    width = max((len(d) for d, _ in rows), default=0) + 1
    lines = [f"    {(declaration + ',' if declaration else ''):<{width}}  // {comment}"
             for declaration, comment in rows]
    return 'extern "C" void forward(\\n' + "\\n".join(lines) + "\\n    const int64_t* sizes)"


# Appended to a wrong result's message: names only (never a shape the kernel is checked on).
WRONG_RESULT_HINT = (
    "if the kernel reads its arguments in another order: the entry point takes "
    + ", ".join(d.split()[-1].lstrip("*") for d, _ in _parameters() if d) + ", sizes "
    "(c_signature() in task.py prints them with their sizes)")
'''
