"""Stand-in for 0.5.5 sglang.srt.model_executor.cuda_graph_runner (the capture-mode flag only)."""

from contextlib import contextmanager

is_capture_mode = False


def get_is_capture_mode():
    return is_capture_mode


@contextmanager
def model_capture_mode():
    global is_capture_mode
    is_capture_mode = True
    yield
    is_capture_mode = False
