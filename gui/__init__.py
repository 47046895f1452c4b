"""Desktop GUI (PySide6)."""
