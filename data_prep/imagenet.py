"""ImageNet-1k (ILSVRC2012) from its training folder: which classes, in which order, named how.

--src is the `train` folder: one sub-folder per WordNet id (`n01440764/`, 1000 of them) of JPEG
files. Classes are the wnids in sorted order (the order torchvision and most papers use).
Human-readable names come from `LOC_synset_mapping.txt` (lines `n01440764 tench, Tinca tinca`,
as in the Kaggle release) if it is in --src or up to four folders above it (the Kaggle layout
puts it four above `ILSVRC/Data/CLS-LOC/train`); a class is then named "n01440764 tench, Tinca
tinca" (the wnid keeps names unique: there are two "crane"s), else by its wnid. With the mapping,
the folder must hold exactly its wnids: a missing one means an incomplete copy.

A validation folder sorted into wnid sub-folders (e.g. by the usual valprep.sh) has the same
layout: point --src at it. Decoding (CMYK and grayscale JPEGs, the PNG named .JPEG) is
`resize.decode_file`'s; one class at a time is `folder.convert_class`'s. Leaves out: the flat
validation folder with its separate label files.
"""

from __future__ import annotations

import re
from pathlib import Path

from data_prep.folder import class_folders
from distcgan.errors import UserError

MAPPING = "LOC_synset_mapping.txt"
_WNID = re.compile(r"n\d{8}")


def find_mapping(src: Path) -> Path | None:
    for folder in [src, *list(src.resolve().parents)[:4]]:
        if (folder / MAPPING).is_file():
            return folder / MAPPING
    return None


def read_mapping(path: Path) -> dict[str, str]:
    """wnid -> description, checked line by line (format, duplicates)."""
    mapping: dict[str, str] = {}
    for line_no, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        wnid, _, text = line.strip().partition(" ")
        if not _WNID.fullmatch(wnid) or wnid in mapping:
            reason = "repeats" if wnid in mapping else "does not start with"
            raise UserError(
                f"{path}:{line_no} {reason} a WordNet id (n + 8 digits): {line[:60]!r}; is it "
                f"ImageNet's {MAPPING}?"
            )
        mapping[wnid] = text.strip()
    return mapping


def imagenet_classes(src: Path) -> tuple[list[str], list[str], str]:
    """(wnid folders in sorted order, class names, where the names came from)."""
    wnids = class_folders(src)
    odd = [d for d in wnids if not _WNID.fullmatch(d)]
    if odd:
        raise UserError(
            f"{src / odd[0]} is not a WordNet id folder (n + 8 digits): is --src the ILSVRC2012 "
            "train folder? For other folders of class sub-folders use the 'folder' source"
        )
    mapping_path = find_mapping(src)
    if mapping_path is None:
        return wnids, list(wnids), "wnids"
    mapping = read_mapping(mapping_path)
    unknown = [w for w in wnids if w not in mapping]
    if unknown:
        raise UserError(f"{src / unknown[0]} is not listed in {mapping_path}: is it ImageNet-1k?")
    missing = sorted(set(mapping) - set(wnids))
    if missing:
        raise UserError(
            f"{src} has {len(wnids)} of the {len(mapping)} classes in {mapping_path} (no "
            f"{missing[0]}/): the copy is incomplete; copy the rest, or use --classes for a subset "
            f"after moving {mapping_path.name} away"
        )
    return wnids, [f"{w} {mapping[w]}" for w in wnids], str(mapping_path)
