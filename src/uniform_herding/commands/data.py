"""`uh data`: write a synthetic archive, or verify an archive (data/archive.py)."""

from __future__ import annotations

from pathlib import Path

import click

from uniform_herding.data.archive import DATASETS, calculate_md5, verify_archive, write_synthetic_archive

_dataset_option = click.option("--dataset", type=click.Choice(list(DATASETS)), default="cifar100", show_default=True)


@click.group("data")
def data_cmd() -> None:
    """Write synthetic archives and verify archives (official layout)."""


@data_cmd.command("synth")
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), required=True, help="Output folder.")
@_dataset_option
@click.option("--train-per-class", type=click.IntRange(min=1), default=500, show_default=True)
@click.option("--test-per-class", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
def synth_cmd(out: Path, dataset: str, train_per_class: int, test_per_class: int, seed: int) -> None:
    """Write a learnable synthetic archive under the official file name, plus its .md5 sidecar."""
    path = write_synthetic_archive(dataset, out, train_per_class, test_per_class, seed)
    click.echo(f"{path}  md5 {calculate_md5(path)}")


@data_cmd.command("verify")
@click.argument("path", type=click.Path(path_type=Path, dir_okay=False))
@_dataset_option
def verify_cmd(path: Path, dataset: str) -> None:
    """Check PATH's md5 (official, or its .md5 sidecar's) and that it parses; print md5 and OK."""
    md5, raw = verify_archive(dataset, path)
    click.echo(
        f"{path}  md5 {md5}  {raw.source}: {len(raw.train_y)} train, {len(raw.test_y)} test images, "
        f"{len(raw.class_names)} classes  OK"
    )
