"""A class's own name is never a potential bias: a tag that names the class (in any case, with ``_`` or ``-`` for a
space, or as a regular plural; :func:`mavias.core.relevance.names_class`) is relevant whatever a judge would say, so no
judge mistake on it can hand the bias path the label. The rule decides before any judge is asked; a human review
still wins over it. (Another class's name is kept out of the bias path by
:func:`mavias.core.relevance.irrelevant_tags`.)"""

CLASS_NAME_SOURCE = "class name"  # a relevance row's source when this rule decided it
