"""ascend-images: matrix-driven, tested container images for Huawei Ascend NPUs."""

__version__ = "0.1.0"
