"""Every host's data starts here: the default of every setting.

The settings themselves (each key with its default, check, one-line meaning and
a comment that explains it) are declared once, as the typed fields of
``Settings`` in podkit/settings.py; this file only loads their defaults. The
docs' settings table (docs/settings.md) is generated from the same declarations
when the site is built (``podkit.settings.settings_table()``).

Why the defaults are declared there and not here: the validated ``Settings``
object needs each key's check, meaning and type as well as its default, so with
the values here a setting would be written twice (a value here, a check there)
and kept in step by hand. Declared there, adding a setting is one field plus the
code that uses it; this file, the docs' table and the tests follow.

Override per group in group_data/<group>.py (e.g. group_data/sandbox.py) or per
host in the inventory. Relative paths are relative to the project root.

pyinfra takes every module-level name of a group_data file as data, except
names that start with ``__`` and names bound by an import statement; podkit's
own reader (podkit/inventory_tmp.py) skips names that start with ``_``. So the
one import is under an underscore name and nothing else is bound here.
"""

from podkit.settings import defaults as _defaults

globals().update(_defaults())
