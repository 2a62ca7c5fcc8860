"""decode: see the README's layout section."""
