"""ascend-images: matrix-driven, tested container images for Huawei Ascend NPUs."""

__version__ = "0.1.0"
# the repository namespace of every tag unless --namespace says otherwise; every default reads it from here
DEFAULT_NAMESPACE = "ascend-images"
