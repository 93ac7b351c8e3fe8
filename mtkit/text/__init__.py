"""Text as people have it: sentences inside paragraphs, inline markup."""
