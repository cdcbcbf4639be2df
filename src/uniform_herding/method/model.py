"""The learner: CIFAR ResNet-18 f_theta, a growing classifier head, imprinting (Sec. 3.1).

Backbone: 3x3 stem (stride 1, no max-pool), BasicBlocks [2,2,2,2] of widths w,2w,4w,8w, global
average pool -> 8w-d feature (512 at w=64). Heads grow by C_new rows per task, keeping old rows.
Cosine head logits are s*cos(f, w_j); the margin s*m is applied by the loss (train.py), never here,
so evaluation and distillation see margin-free logits.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = nn.Sequential()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    """CIFAR ResNet-18 feature extractor; `width` is the base width w."""

    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        layers, c_in = [], width
        for i, c_out in enumerate((width, 2 * width, 4 * width, 8 * width)):
            for j in range(2):
                layers.append(BasicBlock(c_in, c_out, stride=2 if (i > 0 and j == 0) else 1))
                c_in = c_out
        self.layers = nn.Sequential(*layers)
        self.feature_dim = c_in

    def forward(self, x: Tensor) -> Tensor:  # [B,3,32,32] -> [B,8w]
        return self.layers(self.stem(x)).mean(dim=(2, 3))


class Head(nn.Module):
    """A classifier head over features; `grow` appends rows for new classes, keeping old ones."""

    def __init__(self, feature_dim: int, kind: str, scale: float) -> None:
        super().__init__()
        self.kind, self.scale = kind, scale
        self.weight = nn.Parameter(torch.empty(0, feature_dim))  # [C, d]
        self.bias = nn.Parameter(torch.empty(0)) if kind == "linear" else None  # [C]

    @property
    def n_classes(self) -> int:
        return self.weight.shape[0]

    def grow(self, n_new: int) -> None:
        """Append n_new rows initialised as nn.Linear does; the optimizer is rebuilt per task."""
        new = nn.Linear(self.weight.shape[1], n_new).to(self.weight.device)
        self.weight = nn.Parameter(torch.cat([self.weight.data, new.weight.data]))
        if self.bias is not None:
            self.bias = nn.Parameter(torch.cat([self.bias.data, new.bias.data]))

    @torch.no_grad()
    def imprint(self, rows: slice, class_means: Tensor) -> None:
        """Set rows to L2-normalised class means of normalised features; bias 0 (Sec. 3.1)."""
        self.weight.data[rows] = F.normalize(class_means, dim=1)
        if self.bias is not None:
            self.bias.data[rows] = 0.0

    def forward(self, features: Tensor) -> Tensor:  # [B,d] -> [B,C], margin-free
        if self.kind == "cosine":
            return self.scale * F.normalize(features, dim=1) @ F.normalize(self.weight, dim=1).T
        return F.linear(features, self.weight, self.bias)


class Learner(nn.Module):
    """Backbone + head; `forward` returns (features, margin-free logits)."""

    def __init__(self, width: int, head: str, cos_scale: float) -> None:
        super().__init__()
        self.backbone = ResNet18(width)
        self.head = Head(self.backbone.feature_dim, head, cos_scale)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        features = self.backbone(x)
        return features, self.head(features)
