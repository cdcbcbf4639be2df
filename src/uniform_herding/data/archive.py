"""CIFAR archives: download, md5 verification, pickle parsing, synthetic archives in the official format.

The paper trains on CIFAR-100, python version (docs/design.md, "Data"). The archive is downloaded once into a
data dir, verified by md5 and read straight from the tar.gz (nothing is extracted). Tests and the
smoke profile need no network: `write_synthetic_archive` writes a learnable stand-in in the official
layout, with its md5 in an md5sum-style `<archive>.md5` sidecar so that it passes the same check.
The official files are pickles, and unpickling can run code: read only archives that
`locate_archive` has verified.
"""

from __future__ import annotations

import gzip
import http.client
import io
import os
import pickle
import tarfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from uniform_herding.errors import UhError

SIDE = 32
ROW = 3 * SIDE * SIDE  # one image as a pickle row: 3072 uint8 in CHW order


# torchvision's download and checksum helpers, imported on first use: importing torchvision (and
# torch with it) takes seconds, and `uh list`, `uh check` or `uh aggregate` never need them.
def calculate_md5(path: Path) -> str:
    from torchvision.datasets.utils import calculate_md5 as md5

    return md5(path)


def download_url(url: str, root: Path, filename: str, md5: str) -> None:
    from torchvision.datasets.utils import download_url as download

    download(url, root, filename=filename, md5=md5)


@dataclass(frozen=True)
class DatasetSpec:
    """Where an official archive comes from, what it holds, and how its pickles are laid out."""

    name: str  # for messages
    filename: str
    url: str
    md5: str
    n_classes: int
    mean: tuple[float, float, float]  # normalisation, per RGB channel in [0, 1]
    std: tuple[float, float, float]
    folder: str  # the one directory inside the tar
    train_members: tuple[str, ...]
    test_member: str
    meta_member: str
    label_key: str
    names_key: str


DATASETS: dict[str, DatasetSpec] = {
    "cifar100": DatasetSpec(
        name="CIFAR-100",
        filename="cifar-100-python.tar.gz",
        url="https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
        md5="eb9058c3a382ffc7106e4002c42a8d85",
        n_classes=100,
        mean=(0.5071, 0.4865, 0.4409),
        std=(0.2673, 0.2564, 0.2762),
        folder="cifar-100-python",
        train_members=("train",),
        test_member="test",
        meta_member="meta",
        label_key="fine_labels",
        names_key="fine_label_names",
    ),
    "cifar10": DatasetSpec(
        name="CIFAR-10",
        filename="cifar-10-python.tar.gz",
        url="https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
        md5="c58f30108f718f92721af3b95e74349a",
        n_classes=10,
        mean=(0.4914, 0.4822, 0.4465),
        std=(0.2470, 0.2435, 0.2616),
        folder="cifar-10-batches-py",
        train_members=tuple(f"data_batch_{i}" for i in range(1, 6)),
        test_member="test_batch",
        meta_member="batches.meta",
        label_key="labels",
        names_key="label_names",
    ),
}


class DataError(UhError):
    """A data problem the user can fix; the message says how. Exit 1, as `uh data` has always refused one."""

    exit_code = 1


@dataclass(frozen=True)
class RawData:
    """One archive in memory, in the official image and label order."""

    train_x: np.ndarray  # [N, 3, 32, 32] uint8
    train_y: np.ndarray  # [N] int64, original class labels
    test_x: np.ndarray  # [N_test, 3, 32, 32] uint8
    test_y: np.ndarray  # [N_test] int64
    class_names: list[str]
    md5: str  # of the archive file
    # "official" (official md5), "synthetic" (batch labels written by write_synthetic_archive) or "local"
    source: str


# --- locating and verifying ------------------------------------------------------------------------


def locate_archive(
    dataset: str, data_dir: Path, archive: Path | None = None, download: bool = True, fix: str = ""
) -> tuple[Path, str]:
    """The verified archive and its md5: `archive` if named, else data_dir's copy, else a download.

    A named archive must carry the official md5 or the one in its `.md5` sidecar; the data dir's copy
    must carry the official md5. A verified copy is never downloaded again. `fix`: what to advise for
    a named archive that fails (the exact command that regenerates it, where one does).
    """
    spec = DATASETS[dataset]
    if archive is not None:
        return archive, _verify_named(spec, archive, fix)
    path = data_dir / spec.filename
    if not path.exists():
        if not download:
            raise DataError(f"{path} not found; put the official {spec.filename} (md5 {spec.md5}) there")
        _download(spec, data_dir)
    md5 = calculate_md5(path)
    if md5 != spec.md5:
        raise DataError(
            f"{path} has md5 {md5}, not the official {spec.md5}: the file is corrupt or truncated; "
            "delete it and run again to re-download"
        )
    return path, md5


def _sidecar(archive: Path) -> Path:
    """`<archive>.md5`, as md5sum writes it: lets a non-official archive pass verification."""
    return archive.with_name(archive.name + ".md5")


def _verify_named(spec: DatasetSpec, archive: Path, fix: str = "") -> str:
    """md5 of an explicitly named archive, which must be the official one or its sidecar's."""
    if not archive.is_file():
        raise DataError(f"archive {archive} not found; check the path")
    md5 = calculate_md5(archive)
    sidecar = _sidecar(archive)
    recorded = sidecar.read_text().partition(" ")[0].strip() if sidecar.is_file() else ""
    if md5 not in (spec.md5, recorded):
        raise DataError(
            f"{archive} has md5 {md5}, neither the official {spec.name} md5 {spec.md5} nor the one in "
            f"{sidecar.name} ({recorded or 'no sidecar'}): it is corrupt, truncated or not {spec.name}; "
            f"{fix or 'regenerate it with `uh data synth` or use the official archive'}"
        )
    return md5


def _download(spec: DatasetSpec, data_dir: Path) -> None:
    """Fetch the official archive via a .part file, so an interrupted download leaves no bad archive."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DataError(f"cannot create the data dir {data_dir} ({e.strerror}); choose a writable one") from e
    if not os.access(data_dir, os.W_OK):
        raise DataError(
            f"the data dir {data_dir} is not writable, so {spec.filename} cannot be downloaded into it; "
            f"choose a writable data dir or put the official {spec.filename} (md5 {spec.md5}) there"
        )
    part = data_dir / f"{spec.filename}.part"
    # URLError and timeouts are OSErrors; download_url raises RuntimeError on an md5 mismatch.
    try:
        download_url(spec.url, data_dir, filename=part.name, md5=spec.md5)
    except (OSError, RuntimeError, http.client.HTTPException) as e:
        part.unlink(missing_ok=True)
        raise DataError(
            f"could not download {spec.name} from {spec.url} ({e}); "
            f"put the official {spec.filename} (md5 {spec.md5}) into {data_dir}"
        ) from e
    os.replace(part, data_dir / spec.filename)


# --- reading ---------------------------------------------------------------------------------------


# What a truncated or foreign archive raises while it is read (gzip, tar, pickle, missing keys, shapes).
MALFORMED = (tarfile.TarError, EOFError, OSError, zlib.error, pickle.UnpicklingError, KeyError, ValueError)


def read_archive(dataset: str, path: Path) -> RawData:
    """Images, labels and class names straight from the tar.gz; a malformed archive raises DataError."""
    spec = DATASETS[dataset]
    try:
        files = _read_members(path, spec)
        train = [_unpickle(files[m]) for m in spec.train_members]
        train_x, train_y = _images_labels(train, spec)
        test_x, test_y = _images_labels([_unpickle(files[spec.test_member])], spec)
        class_names = _parse_meta(dataset, files[spec.meta_member])
        if len(class_names) != spec.n_classes:
            raise ValueError(f"{len(class_names)} class names, expected {spec.n_classes}")
        synthetic = _text(train[0].get("batch_label", "")).startswith("synthetic")
    except MALFORMED as e:
        raise DataError(
            f"{path} is not a readable {spec.name} archive ({type(e).__name__}: {e}); "
            "delete it and download or regenerate it"
        ) from e
    md5 = calculate_md5(path)
    source = "official" if md5 == spec.md5 else "synthetic" if synthetic else "local"
    return RawData(train_x, train_y, test_x, test_y, class_names, md5, source)


def _read_members(path: Path, spec: DatasetSpec) -> dict[str, bytes]:
    """The pickles of the archive by member name, in one pass over the gzip stream."""
    wanted = {f"{spec.folder}/{m}" for m in (*spec.train_members, spec.test_member, spec.meta_member)}
    files = {}
    with tarfile.open(path, "r:gz") as tar:
        for member in tar:
            if member.name in wanted and (f := tar.extractfile(member)) is not None:
                files[member.name.split("/", 1)[1]] = f.read()
    if len(files) != len(wanted):
        missing = sorted(wanted - {f"{spec.folder}/{m}" for m in files})
        raise DataError(f"{path} lacks {', '.join(missing)}: it is not the official {spec.filename} layout")
    return files


def _text(value: str | bytes) -> str:
    """Python-2 pickles may hold bytes where Python 3 expects str."""
    return value.decode("latin1") if isinstance(value, bytes) else value


def _unpickle(data: bytes) -> dict[str, Any]:
    """A pickled dict with str keys, whether it was written with str or bytes keys."""
    obj = pickle.loads(data, encoding="latin1")
    if not isinstance(obj, dict):
        raise ValueError(f"expected a pickled dict, got {type(obj).__name__}")
    return {_text(k): v for k, v in obj.items()}


def _parse_meta(dataset: str, data: bytes) -> list[str]:
    """Class names from the archive's meta pickle, in label order."""
    return [_text(n) for n in _unpickle(data)[DATASETS[dataset].names_key]]


def _images_labels(batches: list[dict[str, Any]], spec: DatasetSpec) -> tuple[np.ndarray, np.ndarray]:
    """Rows of 3072 uint8 (CHW) -> [N, 3, 32, 32] images and their int64 labels, checked."""
    x = np.concatenate([np.asarray(b["data"]) for b in batches])
    y = np.concatenate([np.asarray(b[spec.label_key], dtype=np.int64) for b in batches])
    if x.dtype != np.uint8 or x.ndim != 2 or x.shape[1] != ROW or len(x) != len(y):
        raise ValueError(f"data {x.dtype} {x.shape} with {len(y)} labels; expected uint8 [N, {ROW}] and N labels")
    if np.any((y < 0) | (y >= spec.n_classes)):
        raise ValueError(f"labels outside 0..{spec.n_classes - 1}")
    return x.reshape(-1, 3, SIDE, SIDE), y


# --- synthetic archives ----------------------------------------------------------------------------

LOW = 4  # side of a class's pattern before upsampling to 32 (blocks of 8 px survive a 4 px crop)
CONTRAST = 0.3  # pattern amplitude, in units of the [0, 1] pixel range
JITTER = 1.0  # per-image deviation from the class pattern, in units of the pattern's amplitude
NOISE = 0.25  # per-pixel noise (uniform, cheaper than gaussian), its sd in units of the pixel range
BRIGHTNESS = 0.05  # per-image brightness shift


def write_synthetic_archive(
    dataset: str, out_dir: Path, train_per_class: int = 500, test_per_class: int = 100, seed: int = 0
) -> Path:
    """Write a learnable stand-in for the official archive and its `.md5` sidecar; return its path.

    Same member names and pickle keys as the official file, samples shuffled across classes, and the
    same bytes for the same arguments (so its md5 pins the data in result.json). Each class is a
    random 4x4 colour pattern upsampled to 32x32 plus a class tint; each image adds its own pattern
    jitter, brightness shift and pixel noise, so a classifier has something real to learn.
    """
    spec = DATASETS[dataset]
    names = [f"class_{c:03d}" for c in range(spec.n_classes)]
    train_x, train_y, test_x, test_y = _synthetic_split(spec.n_classes, train_per_class, test_per_class, seed)
    n = len(spec.train_members)
    xs, ys = np.array_split(train_x, n), np.array_split(train_y, n)  # views: no copies
    members = {
        m: _batch(spec, f"synthetic training batch {i + 1} of {n}", xs[i], ys[i], names)
        for i, m in enumerate(spec.train_members)
    }
    members[spec.test_member] = _batch(spec, "synthetic testing batch 1 of 1", test_x, test_y, names)
    members[spec.meta_member] = _synthetic_meta(spec, names)
    path = out_dir / spec.filename
    _write_with_sidecar(path, spec.folder, members)
    return path


def _synthetic_split(
    k: int, train_per_class: int, test_per_class: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Training and test images (rows of 3072 uint8) and labels of `k` synthetic classes, shuffled across
    classes: one generator per class and one for the shuffles, all from `seed`."""
    *class_rngs, shuffle_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(k + 1))
    train_y = shuffle_rng.permutation(np.repeat(np.arange(k), train_per_class))
    test_y = shuffle_rng.permutation(np.repeat(np.arange(k), test_per_class))
    train_x = np.empty((len(train_y), ROW), np.uint8)
    test_x = np.empty((len(test_y), ROW), np.uint8)
    for c, rng in enumerate(class_rngs):  # one class at a time keeps the float arrays small
        images = _class_images(rng, train_per_class + test_per_class)
        train_x[train_y == c] = images[:train_per_class]
        test_x[test_y == c] = images[train_per_class:]
    return train_x, train_y, test_x, test_y


def _write_with_sidecar(path: Path, folder: str, members: dict[str, Any]) -> None:
    """The archive of `members` at `path` and its `.md5` sidecar, each atomically, the sidecar first: an archive
    never lands without one."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _atomic(path) as tmp:
            with open(tmp, "wb") as f:
                _write_tar(f, folder, members)
            md5 = calculate_md5(tmp)
            with _atomic(_sidecar(path)) as side:
                side.write_text(f"{md5}  {path.name}\n")
    except OSError as e:
        raise DataError(f"cannot write {path} ({e.strerror}); choose a writable output folder") from e


def _class_images(rng: np.random.Generator, n: int) -> np.ndarray:
    """n images of one class as rows of 3072 uint8: class pattern and tint, per-image variation."""
    pattern = rng.uniform(-1, 1, (1, 3, LOW, LOW))
    tint = rng.uniform(-0.15, 0.15, (1, 3, 1, 1))
    jitter = JITTER * rng.standard_normal((n, 3, LOW, LOW))
    brightness = BRIGHTNESS * rng.standard_normal((n, 1, 1, 1))
    low = (0.5 + CONTRAST * (pattern + jitter) + tint + brightness).astype(np.float32)  # [n,3,4,4]
    scale = SIDE // LOW
    image = low.repeat(scale, axis=2).repeat(scale, axis=3)  # [n,3,32,32]
    image += NOISE * 12**0.5 * (rng.random(image.shape, dtype=np.float32) - 0.5)
    return (np.clip(image, 0, 1) * 255 + 0.5).astype(np.uint8).reshape(n, ROW)


def _batch(spec: DatasetSpec, label: str, x: np.ndarray, y: np.ndarray, names: list[str]) -> dict[str, Any]:
    """One data pickle with the official keys (CIFAR-100 also has coarse labels: 5 classes each)."""
    batch: dict[str, Any] = {
        "batch_label": label,
        spec.label_key: y.tolist(),
        "data": x,
        "filenames": [f"{names[c]}_s_{i:06d}.png" for i, c in enumerate(y)],
    }
    if spec.label_key == "fine_labels":
        batch["coarse_labels"] = (y // 5).tolist()
    return batch


def _synthetic_meta(spec: DatasetSpec, names: list[str]) -> dict[str, Any]:
    """The meta pickle with the official keys (CIFAR-100: 20 superclasses)."""
    if spec.names_key == "fine_label_names":
        return {"fine_label_names": names, "coarse_label_names": [f"superclass_{i:02d}" for i in range(20)]}
    return {"num_cases_per_batch": 10000, "label_names": names, "num_vis": ROW}


@contextmanager
def _atomic(path: Path) -> Iterator[Path]:
    """A temp path beside `path` that replaces it on success: readers never see a partial file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _write_tar(f: io.BufferedWriter, folder: str, members: dict[str, Any]) -> None:
    """Pickle each member into `folder/<name>` of a tar.gz with fixed metadata: equal inputs, equal bytes."""
    # mtime 0 and no file name in the gzip header; TarInfo defaults to mtime 0, uid/gid 0, no owner names.
    # Level 0 (stored): the pixel noise does not compress, and compressing it would take seconds.
    with (
        gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0, compresslevel=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        directory = tarfile.TarInfo(folder)
        directory.type, directory.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(directory)
        for name, obj in members.items():
            data = pickle.dumps(obj, protocol=4)  # one at a time keeps memory modest
            info = tarfile.TarInfo(f"{folder}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def verify_archive(dataset: str, path: Path) -> tuple[str, RawData]:
    """`uh data verify`: PATH's md5, the official one or its sidecar's (locate_archive), and what it holds, read as a
    run reads it; DataError where either fails."""
    _, md5 = locate_archive(dataset, path.parent, archive=path)
    return md5, read_archive(dataset, path)
