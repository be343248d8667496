"""PPD: parallel prompt decoding (trained prompt tokens, dynamic sparse trees, hardware-aware sizing)."""
