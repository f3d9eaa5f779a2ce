"""`distcgan report`: one self-contained HTML page per run or comparison directory (page.py)."""
