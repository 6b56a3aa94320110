"""The FlashInfer subset builder without the network or nvcc: which files of a (small, fake)
unpacked wheel it keeps, the archive it writes, where it finds the CUDA toolkit and the headers
norm.cu needs, and its refusal, before any download, where nvcc is missing. (The real build:
python -m benchmarks.flashinfer_subset.)
"""

from __future__ import annotations

import tarfile
import zipfile
from pathlib import Path

import pytest

from benchmarks import flashinfer_subset as subset
from benchmarks.flashinfer_subset import SubsetError, main


def _tree(root: Path, names: list[str]) -> Path:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"content of {name}\n")
    return root


def _tool(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("#!/bin/sh\nexit 0\n")
    (folder / name).chmod(0o755)
    return folder / name


FLASHINFER_WHEEL = [
    "flashinfer/__init__.py", "flashinfer/norm/__init__.py", "flashinfer/activation.py",
    "flashinfer/fused_moe/core.py", "flashinfer/py.typed",
    "flashinfer/__pycache__/activation.cpython-312.pyc",
    "flashinfer/data/include/flashinfer/norm.cuh", "flashinfer/data/cccl/cub/cub/cub.cuh",
    "flashinfer/data/cccl/LICENSE", "flashinfer/data/csrc/norm.cu",
    "flashinfer/data/csrc/tvm_ffi_utils.h", "flashinfer/data/csrc/gemm.cu",
    "flashinfer/data/cutlass/include/cutlass/cutlass.h", "flashinfer/data/spdlog/spdlog.h",
    "flashinfer_python-0.7.2.dist-info/METADATA", "flashinfer_python-0.7.2.dist-info/WHEEL",
    "flashinfer_python-0.7.2.dist-info/RECORD", "flashinfer_python-0.7.2.dist-info/top_level.txt",
    "flashinfer_python-0.7.2.dist-info/entry_points.txt",
    "flashinfer_python-0.7.2.dist-info/licenses/LICENSE",
]


def test_it_keeps_the_imported_modules_the_sources_read_and_what_metadata_reads(tmp_path):
    root = _tree(tmp_path / "fi", FLASHINFER_WHEEL)
    imported = [root / "flashinfer/__init__.py", str(root / "flashinfer/norm/__init__.py"),
                Path(pytest.__file__)]  # a module from elsewhere is not the wheel's
    csrc = [root / "flashinfer/data/csrc/norm.cu", root / "flashinfer/data/csrc/tvm_ffi_utils.h"]
    assert subset.select(root, imported, csrc) == sorted([
        "flashinfer/__init__.py", "flashinfer/norm/__init__.py", "flashinfer/py.typed",
        "flashinfer/data/include/flashinfer/norm.cuh", "flashinfer/data/cccl/cub/cub/cub.cuh",
        "flashinfer/data/cccl/LICENSE", "flashinfer/data/csrc/norm.cu",
        "flashinfer/data/csrc/tvm_ffi_utils.h",
        "flashinfer_python-0.7.2.dist-info/METADATA", "flashinfer_python-0.7.2.dist-info/WHEEL",
        "flashinfer_python-0.7.2.dist-info/top_level.txt",
        "flashinfer_python-0.7.2.dist-info/entry_points.txt",
        "flashinfer_python-0.7.2.dist-info/licenses/LICENSE"])  # not activation, moe, cutlass


def test_it_keeps_tvm_ffi_and_its_dist_info_but_not_libbacktraces_sources(tmp_path):
    root = _tree(tmp_path / "ffi", [
        "tvm_ffi/__init__.py", "tvm_ffi/core.cpython-312-x86_64-linux-gnu.so",
        "tvm_ffi/lib/libtvm_ffi.so", "tvm_ffi/include/tvm/ffi/c_api.h",
        "tvm_ffi/3rdparty/dlpack/include/dlpack/dlpack.h",
        "tvm_ffi/3rdparty/libbacktrace/alloc.c", "tvm_ffi/3rdparty/libbacktrace/config/libtool.m4",
        "tvm_ffi/__pycache__/__init__.cpython-312.pyc",
        "apache_tvm_ffi-0.1.15.post2.dist-info/RECORD",
        "apache_tvm_ffi-0.1.15.post2.dist-info/METADATA"])
    assert subset.select(root, (), ()) == sorted([
        "tvm_ffi/__init__.py", "tvm_ffi/core.cpython-312-x86_64-linux-gnu.so",
        "tvm_ffi/lib/libtvm_ffi.so", "tvm_ffi/include/tvm/ffi/c_api.h",
        "tvm_ffi/3rdparty/dlpack/include/dlpack/dlpack.h",
        "apache_tvm_ffi-0.1.15.post2.dist-info/RECORD",
        "apache_tvm_ffi-0.1.15.post2.dist-info/METADATA"])


def test_the_csrc_files_are_those_ninja_says_the_build_read(tmp_path):
    data = _tree(tmp_path / "fi/flashinfer/data", ["csrc/norm.cu", "csrc/tvm_ffi_utils.h"])
    build_dir = tmp_path / "ws/cached_ops/norm"
    deps = (f"{build_dir}/norm.cuda.o: #deps 3, deps mtime 1 (VALID)\n"
            f"    {data}/csrc/norm.cu\n"
            "    ../../../fi/flashinfer/data/csrc/tvm_ffi_utils.h\n"  # relative to build_dir
            f"    {data}/include/flashinfer/norm.cuh\n"
            "    /usr/local/cuda/include/cuda_runtime.h\n\n")
    assert subset.csrc_read(deps, build_dir, data) == {(data / "csrc/norm.cu").resolve(),
                                                       (data / "csrc/tvm_ffi_utils.h").resolve()}


def test_the_archive_holds_the_files_by_relative_name_sorted_and_owned_by_root(tmp_path):
    files = _tree(tmp_path / "src", ["b/x.py", "a/y.so", "c.txt"])
    out = tmp_path / "anchors/fi_subset.tar.xz"
    size = subset.write_tar([(files / "b/x.py", "flashinfer/x.py"),
                             (files / "c.txt", "tvm_ffi/c.txt"),
                             (files / "a/y.so", "flashinfer/data/aot/y/y.so")], out)
    assert size == out.stat().st_size and out.read_bytes()[:6] == b"\xfd7zXZ\x00"
    assert list(out.parent.iterdir()) == [out]  # the partial file was renamed
    with tarfile.open(out) as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == ["flashinfer/data/aot/y/y.so", "flashinfer/x.py",
                                             "tvm_ffi/c.txt"]
        assert all(m.isfile() and (m.uid, m.gid, m.uname) == (0, 0, "root") for m in members)
        assert tar.extractfile("flashinfer/x.py").read() == b"content of b/x.py\n"


def test_the_toolkit_is_found_from_nvcc_on_path_and_a_named_one_must_have_nvcc(tmp_path,
                                                                                monkeypatch):
    monkeypatch.setattr(subset, "DEFAULT_CUDA_HOME", tmp_path / "no-cuda")
    toolkit = tmp_path / "cuda-13.0"
    _tree(toolkit, ["include/cuda_runtime.h"])
    tools = tmp_path / "bin"
    _tool(toolkit / "bin", "nvcc"), _tool(tools, "ninja"), _tool(tools, "c++")
    path = f"{toolkit / 'bin'}:{tools}"
    assert subset.find_cuda_home({"PATH": path}) == toolkit
    with pytest.raises(SubsetError, match=f"nvcc not found \\(no {tmp_path}/other/bin/nvcc\\)"):
        subset.find_cuda_home({"PATH": path, "CUDA_HOME": str(tmp_path / "other")})
    with pytest.raises(SubsetError, match="ninja not found on PATH"):
        subset.find_cuda_home({"PATH": str(toolkit / "bin"), "CUDA_HOME": str(toolkit)})


def test_without_nvcc_it_exits_1_saying_so_before_downloading(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(subset, "DEFAULT_CUDA_HOME", tmp_path / "no-cuda")
    for name in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))

    def no_download(*args, **kwargs):
        raise AssertionError("downloaded although nvcc is missing")
    monkeypatch.setattr(subset, "pip_download", no_download)
    out = tmp_path / "fi_subset.tar.xz"
    assert main(["--out", str(out), "--work", str(tmp_path / "work")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("flashinfer_subset: nvcc not found (not on PATH, no ")
    assert "set CUDA_HOME" in err and not out.exists()


def test_the_headers_norm_needs_are_downloaded_only_where_no_folder_has_them(tmp_path,
                                                                              monkeypatch):
    toolkit, given = tmp_path / "cuda", tmp_path / "given"
    _tree(given, ["cublasLt.h", "curand_kernel.h"])
    wheel = tmp_path / "nvidia_cublas-13.0.2.14-py3-none-manylinux_2_27_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("nvidia/cu13/include/cublasLt.h", "// cublasLt\n")
        archive.writestr("nvidia/cu13/include/curand_kernel.h", "// curand\n")
        archive.writestr("nvidia/cu13/lib/libcublasLt.so.13", "not a header")
    downloads = []
    monkeypatch.setattr(subset, "pip_download",
                        lambda requirements, dest, host: downloads.append(requirements) or [wheel])
    assert subset.cuda_includes(toolkit, [given], tmp_path / "work") == [given]
    _tree(toolkit, ["include/cublasLt.h", "include/curand_kernel.h"])
    assert subset.cuda_includes(toolkit, [], tmp_path / "work") == []
    assert downloads == []
    headers = tmp_path / "work/cuda-headers"
    assert subset.cuda_includes(tmp_path / "bare", [], tmp_path / "work") == [headers]
    assert downloads == [subset.HEADER_WHEELS]
    assert sorted(p.name for p in headers.iterdir()) == ["cublasLt.h", "curand_kernel.h"]
    assert subset.cuda_includes(tmp_path / "bare", [], tmp_path / "work") == [headers]
    assert len(downloads) == 1  # the headers of the first download are used again
