"""policy: see the README's layout section."""
