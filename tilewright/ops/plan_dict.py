"""``PlanDict``: the ops' call plans by key, the last call's (key, plan) compared first.

An ops call builds a key of everything its checks and plan read (``rows``, ``dispatch._matmul_key``,
``attention_dispatch._dense_key``) and looks its plan up.  A dict lookup hashes the key (each shape
and stride tuple, each device) and then compares it with the stored key; a repeat of the last
call's signature, the common case (a model's layers call an op with one signature), needs only the
comparison: ``find`` compares with the last (key, plan) first (~20% of key and lookup on the CPU
stub, 250 of 1390 ns for decode's 23 items).

Contract: ``last`` holds a key stored in the dict together with the plan stored under it, or
(None, None).  ``find(key)`` returns what ``get(key)`` returns: an equal key hashes equal, so the
lookup would find the stored key's plan.  Storing a plan makes it the last; every other change
(clear, pop, del, update, setdefault) empties ``last``.  ``last`` is one tuple replaced whole, so
another thread reads a key with its own plan.  One race is left: a plan found by one thread while
another clears the dict can become the last after the clear, until the next change.  It is still a
plan made (after every check) for that key, so its calls are right; only a configuration chosen
again after ``ops.forget_plans`` (a new tuning entry) may wait for that thread's next change, as a
call that found its plan just before the clear uses it without the memo too.
"""

from __future__ import annotations

_NOTHING = (None, None)


class PlanDict(dict):
    __slots__ = ("last",)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.last = _NOTHING

    def find(self, key):
        """``self.get(key)``, with no hash when ``key`` equals the last key found or stored; a key
        that cannot be hashed or compared raises as the lookup would (the callers' checked path)."""
        last = self.last
        if key == last[0]:
            return last[1]
        plan = self.get(key)
        if plan is not None:
            self.last = (key, plan)
        return plan

    def __setitem__(self, key, plan) -> None:
        super().__setitem__(key, plan)
        self.last = (key, plan)

    # every other change forgets the last key (it may have been removed or replaced)
    def clear(self) -> None:
        self.last = _NOTHING
        super().clear()

    def __delitem__(self, key) -> None:
        self.last = _NOTHING
        super().__delitem__(key)

    def pop(self, *args):
        self.last = _NOTHING
        return super().pop(*args)

    def popitem(self):
        self.last = _NOTHING
        return super().popitem()

    def update(self, *args, **kwargs) -> None:
        self.last = _NOTHING
        super().update(*args, **kwargs)

    def setdefault(self, key, default=None):
        self.last = _NOTHING
        return super().setdefault(key, default)

    def __ior__(self, other):
        self.last = _NOTHING
        return super().__ior__(other)
