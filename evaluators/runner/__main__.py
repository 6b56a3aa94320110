"""``python -m kernelswarm.evaluators.runner --request-fd R --reply-fd W --arena-fd A``."""

from __future__ import annotations

import argparse
import faulthandler
import sys

from .limits import apply_limits, exit_with_parent


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kernelswarm.evaluators.runner")
    parser.add_argument("--request-fd", type=int, required=True)
    parser.add_argument("--reply-fd", type=int, required=True)
    parser.add_argument("--arena-fd", type=int, required=True)
    parser.add_argument("--memory-limit-mb", type=int, default=None)
    return parser.parse_args(argv)


ARGS = _arguments(sys.argv[1:])
apply_limits(ARGS.memory_limit_mb)
exit_with_parent(ARGS.request_fd)
faulthandler.enable(all_threads=False)  # a crash leaves its Python stack in the quoted log

# torch comes in with the serving loop: only now that the limits above are in place.
from .serve import serve  # noqa: E402

sys.exit(serve(ARGS.request_fd, ARGS.reply_fd, ARGS.arena_fd))
