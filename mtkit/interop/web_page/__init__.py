"""The page of `mtkit export --format web` (index.html, page.js), copied into every exported site."""
