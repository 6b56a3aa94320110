# Tries: reach the network: a TCP connection (the socket module, imported through
# `torch.importlib`) to a port on 127.0.0.1 where the test listens. A refused connection raises,
# which fails the call.
import torch
import triton
import triton.language as tl


@triton.jit
def silu_kernel(out_ptr, x_ptr, d, BLOCK: tl.constexpr):
    row = tl.program_id(1).to(tl.int64)
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < d
    gate = tl.load(x_ptr + row * 2 * d + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * 2 * d + d + cols, mask=mask, other=0.0).to(tl.float32)
    y = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(out_ptr + row * d + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


STARTED = []


def silu_and_mul(out, x, tokens, d, BLOCK=1024):
    if not STARTED:
        STARTED.append(True)
        socket = torch.importlib.import_module("soc" + "ket")
        STARTED.append(socket.create_connection(("127.0.0.1", int("@PORT@")), timeout=2.0))
    silu_kernel[(triton.cdiv(d, BLOCK), tokens)](out, x, d, BLOCK=BLOCK)
