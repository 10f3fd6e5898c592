"""Warp's "no CUDA driver" warning: dropped for a process that simulates on the CPU, kept for a CUDA one."""

from __future__ import annotations

import os

from unilab.sim.driver_warning import without_driver_warning

WARNING = b"Warp CUDA warning: Could not find or load the NVIDIA CUDA driver. GPU execution will not be available.\n"


def test_a_cpu_process_drops_the_warning_and_keeps_every_other_line(capfd):
    with without_driver_warning(cpu=True):
        os.write(2, b"Warp CUDA error: a real one\n")  # native code writes to the descriptor, not sys.stderr
        os.write(2, WARNING)
        os.write(2, b"after it\n")
    assert capfd.readouterr().err == "Warp CUDA error: a real one\nafter it\n"


def test_a_cuda_process_keeps_the_warning(capfd):
    with without_driver_warning(cpu=False):
        os.write(2, WARNING)
    assert capfd.readouterr().err == WARNING.decode()


def test_the_standard_error_is_back_after_an_exception(capfd):
    try:
        with without_driver_warning(cpu=True):
            raise RuntimeError("failed inside")
    except RuntimeError:
        pass
    os.write(2, b"still here\n")
    assert capfd.readouterr().err == "still here\n"
