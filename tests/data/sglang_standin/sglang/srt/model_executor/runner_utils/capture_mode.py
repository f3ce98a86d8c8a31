"""Stand-in for 0.5.23 sglang.srt.model_executor.runner_utils.capture_mode (the flag only)."""

from contextlib import contextmanager

is_capture_mode = False


def get_is_capture_mode() -> bool:
    return is_capture_mode


@contextmanager
def model_capture_mode():
    global is_capture_mode
    is_capture_mode = True
    try:
        yield
    finally:
        is_capture_mode = False
