"""cache: see the README's layout section."""
