#!/usr/bin/env python3
"""Compile the BMS kernel module (the parts src/bms/device/rows.rs embeds,
in its order) with NVRTC for an architecture, without a GPU, and print
ptxas' resource report (registers and spills a kernel): what a session
without device time can check before its kernels meet a device.

    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \\
        --platform manylinux2014_x86_64 -d /tmp/nvrtc nvidia-cuda-nvrtc-cu12
    (cd /tmp/nvrtc && unzip -o -q nvidia_cuda_nvrtc*.whl)
    python3 tools/nvrtc_check.py /tmp/nvrtc/nvidia/cuda_nvrtc/lib/libnvrtc.so.12 [sm_90] [CUBIN]

With CUBIN, the compiled module is written there too, for the SASS a session
without a GPU can read: Triton's wheel (pip download triton) carries
triton/backends/nvidia/bin/cuobjdump; `cuobjdump -sass CUBIN`.

MATFREE_NVRTC_OPTIONS adds options as the library does (src/cuda/runtime.rs),
e.g. `-DCAL_BLOCKS=7` for another register cap of bms_calibrate.

Exit status 0 when NVRTC compiles the module; its log is printed either way.
"""
import ctypes
import os
import pathlib
import re
import sys

KERNELS = pathlib.Path(__file__).resolve().parent.parent / "kernels"


def module_source():
    # The include_str! parts of BMS_KERNELS.source, joined by newlines.
    rows = (KERNELS.parent / "src/bms/device/rows.rs").read_text()
    block = rows[rows.index("pub static BMS_KERNELS"):rows.index("kernels: &[")]
    parts = re.findall(r'include_str!\("\.\./\.\./\.\./kernels/([^"]+)"\)', block)
    return "\n".join((KERNELS / p).read_text() for p in parts).encode(), parts


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    lib = ctypes.CDLL(sys.argv[1])
    arch = sys.argv[2] if len(sys.argv) > 2 else "sm_90"
    src, parts = module_source()
    prog = ctypes.c_void_p()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"bms.cu", 0, None, None) != 0:
        sys.exit("nvrtcCreateProgram failed")
    # MATFREE_NVRTC_OPTIONS: the further options the library passes too.
    extra = os.environ.get("MATFREE_NVRTC_OPTIONS", "").split()
    opts = [f"--gpu-architecture={arch}".encode(), b"--ptxas-options=-v"] + [o.encode() for o in extra]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    print(f"parts: {', '.join(parts)}")
    print(log.value.decode())
    print(f"nvrtcCompileProgram: {rc} ({'ok' if rc == 0 else 'failed'})")
    if rc == 0 and len(sys.argv) > 3:
        lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
        cubin = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetCUBIN(prog, cubin)
        pathlib.Path(sys.argv[3]).write_bytes(cubin.raw)
        print(f"cubin: {sys.argv[3]} ({size.value} bytes)")
    sys.exit(0 if rc == 0 else 1)


if __name__ == "__main__":
    main()
