"""core: see the README's layout section."""
