# The reproduction image for "Uniform Herding" (class-incremental CIFAR-100).
# The paper's software: Python 3.12, PyTorch 2.11.0+cu128, Lightning 2.6.5 (App. A, Table 'Protocol settings').
#
#   printf 'UID=%s\nGID=%s\n' `id -u` `id -g` > .env
#   GIT_REVISION=$(git rev-parse HEAD) SOURCE_URL=$(git remote get-url origin) docker compose build
#   docker compose run --rm repro B3          # one run ID, seeds 1993 2023 42 (GPU)
#   docker compose run --rm repro all         # all twelve, then check and report (GPU)
#   docker compose run --rm smoke             # CPU-only kick-the-tires, minutes
#
# The build needs BuildKit (RUN --mount=type=secret, COPY --chmod): Docker's default builder since
# Docker Engine 23.0; on 20.10 to 22.x, set DOCKER_BUILDKIT=1.
#
# Layers: OS python -> venv with torch (cu128) -> pinned dependencies -> the project (code last, so an
# edit to src/ rebuilds only the last layers).
#
# The build arguments below default to the paper's software; a reviewer builds with none of them.
# Nothing here needs the CUDA base: torch's cu128 wheels bring their CUDA libraries, and the NVIDIA
# runtime brings the driver. So BASE_IMAGE=ubuntu:24.04 builds the same image where the CUDA tag has
# gone (docs/reproducing.md, "When the CUDA base tag is gone"). CI (.ci/container) overrides only the
# base image and torch's source, because the CUDA base image and the cu128 index cannot be reached
# there (docs/reproducing.md, "What the CI build proves").
ARG BASE_IMAGE=nvidia/cuda:12.8.1-base-ubuntu24.04
# hadolint ignore=DL3006
FROM ${BASE_IMAGE}

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# Ubuntu 24.04's python3 is 3.12. Versions not pinned: the noble archive keeps only the newest
# security/updates build of each package, so a pinned version stops installing after the next update;
# the Python packages, which carry the results, are pinned exactly below.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/*

ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN python3 -m venv "$VIRTUAL_ENV"

WORKDIR /app

# 1. torch and torchvision, the CUDA 12.8 builds the paper used, from the PyTorch cu128 index. Their
#    other dependencies (filelock, sympy, ...) are held to the versions in constraints.txt; the
#    CUDA 12.8 runtime wheels are pinned by this torch itself (constraints.txt explains why they are
#    not in it). Only the cu128 index has the +cu128 builds, so the default index cannot supply torch.
#    TORCH_CUDA is what torch.version.cuda must say. The optional build secret ca_bundle is a CA
#    bundle for pip behind a TLS-intercepting proxy (CI passes one; a reviewer needs none).
ARG TORCH_VERSION=2.11.0+cu128
ARG TORCHVISION_VERSION=0.26.0+cu128
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128
ARG TORCH_CUDA=12.8
COPY constraints.txt ./
RUN --mount=type=secret,id=ca_bundle \
    if [ -s /run/secrets/ca_bundle ]; then export PIP_CERT=/run/secrets/ca_bundle; fi \
    && pip install --no-cache-dir -c constraints.txt ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} \
        "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION"

# 2. The rest of pyproject.toml's dependencies at the versions of constraints.txt, the ones CI tests
#    with. torch==2.11.0 there is met by the installed 2.11.0+cu128, which pip keeps. The check fails
#    the build if pip swapped torch after all, or if its CUDA is not TORCH_CUDA.
COPY pyproject.toml ./
RUN --mount=type=secret,id=ca_bundle \
    if [ -s /run/secrets/ca_bundle ]; then export PIP_CERT=/run/secrets/ca_bundle; fi \
    && python3 -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install --no-cache-dir -c constraints.txt -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt \
    && python3 -c "import os, torch; from importlib.metadata import version; \
assert version('torch') == os.environ['TORCH_VERSION'], version('torch'); \
assert version('torchvision') == os.environ['TORCHVISION_VERSION'], version('torchvision'); \
assert torch.version.cuda == os.environ['TORCH_CUDA'], torch.version.cuda" \
    && pip check

# 3. The project itself (editable, so repo-relative paths such as expected_results/ resolve under /app).
COPY README.md ./
COPY src/ ./src/
COPY expected_results/ ./expected_results/
COPY --chmod=0755 reproduce.sh ./
RUN pip install --no-cache-dir --no-deps --no-build-isolation -e . \
    && uh --help > /dev/null \
    && mkdir -m 1777 /data /results /results-smoke

# Data and results are bind mounts (docker-compose.yml); the directories above are world-writable so
# that any --user works without them too. HOME and the caches point to /tmp for an arbitrary UID;
# torch's compile cache is named too, else torch looks the UID up in /etc/passwd (getpass.getuser)
# and fails on import for a host UID the image does not know. NVIDIA_DRIVER_CAPABILITIES: the driver
# libraries torch needs (compute: libcuda; utility: nvidia-smi), as the CUDA base sets it, so that
# the image asks the NVIDIA runtime for the same on an ubuntu:24.04 base.
ENV UH_IN_CONTAINER=1 \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    UH_DATA_DIR=/data \
    UH_RESULTS_DIR=/results \
    UH_SMOKE_RESULTS_DIR=/results-smoke \
    HOME=/tmp \
    XDG_CACHE_HOME=/tmp/.cache \
    MPLCONFIGDIR=/tmp/.cache/matplotlib \
    TORCHINDUCTOR_CACHE_DIR=/tmp/.cache/torchinductor

# Last, so that a new revision rebuilds no other layer. GIT_REVISION labels the image, and uh records it
# in result.json (provenance.git_revision, with git_revision_verified false): a claim, since .git is not
# in the build context and any value can be passed. What is checked is the code hash, computed from the
# files in the image (provenance.code_sha256; `uh --version` prints it; docs/reproducing.md).
# docker-compose.yml passes GIT_REVISION and SOURCE_URL from the environment of `docker compose build`.
ARG GIT_REVISION=unknown
ARG SOURCE_URL=unknown
ARG BASE_IMAGE
ENV UH_GIT_REVISION=$GIT_REVISION
LABEL org.opencontainers.image.title="uniform-herding" \
      org.opencontainers.image.description="Reproduction of 'Uniform Herding: Exemplar Replay with Representation Refresh' (class-incremental CIFAR-100)" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.source=$SOURCE_URL \
      org.opencontainers.image.revision=$GIT_REVISION \
      org.opencontainers.image.base.name=$BASE_IMAGE

# 1000:1000 is the image's "ubuntu" user; docker-compose.yml runs as the host user instead.
USER 1000:1000
ENTRYPOINT ["/app/reproduce.sh"]
CMD ["--help"]
