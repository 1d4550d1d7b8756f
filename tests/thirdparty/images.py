"""Real image and document files for the uploads (a PNG drawn with Pillow, which Wagtail needs)."""

from __future__ import annotations

import io

from django.core.files.base import ContentFile
from django.core.files.images import ImageFile
from PIL import Image as PILImage


def png(name: str, colour: str = "teal") -> ImageFile:
    buffer = io.BytesIO()
    PILImage.new("RGB", (64, 48), colour).save(buffer, "PNG")
    return ImageFile(io.BytesIO(buffer.getvalue()), name=name)


def text_file(name: str, text: str) -> ContentFile[bytes]:
    return ContentFile(text.encode(), name=name)
