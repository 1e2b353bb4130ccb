"""Argument types the package's command lines share: a bad value is a usage error
(argparse's message and status 2) before any work starts."""
import argparse
import math


def whole(minimum: int):
    """An argparse type: a whole number >= ``minimum``."""
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") \
                from None
        if n < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {n}")
        return n
    parse.__name__ = f"whole number >= {minimum}"
    return parse


def seconds(text: str) -> float:
    """An argparse type: a finite number of seconds > 0."""
    try:
        s = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") \
            from None
    if not (math.isfinite(s) and s > 0):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text}")
    return s
