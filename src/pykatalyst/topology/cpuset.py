"""Immutable CPU sets in the Linux list format (``0-3,8-11``).

The list format is what ``cpuset.cpus``, ``/sys/devices/system/cpu/online`` and
``node*/cpulist`` hold, and what Katalyst writes into cgroups and CNR objects. A set is
stored as one Python int used as a bitmask (bit *i* set = cpu *i* present), so union,
intersection and difference are single machine-level big-int operations: allocators and
per-pod cpuset diffing call them constantly.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import Final

__all__ = ["MAX_CPU_ID", "CPUSet", "CPUSetError"]

# Well beyond any kernel's NR_CPUS; bounds memory use when reading hostile input.
MAX_CPU_ID: Final = (1 << 20) - 1

_ACCEPTED: Final = (
    "a comma-separated list of cpu ids and inclusive ranges such as '0-3,8-11' or '5' "
    "(non-negative integers, range start <= end, no empty items; '' is the empty set)"
)


class CPUSetError(ValueError):
    """Text or values that do not describe a set of cpus."""

    def __init__(self, value: object, reason: str) -> None:
        self.value = value
        self.reason = reason
        super().__init__(f"invalid cpuset {value!r}: {reason}; expected {_ACCEPTED}")


def _check_id(cpu: object, source: object) -> int:
    if not isinstance(cpu, int) or isinstance(cpu, bool):
        raise CPUSetError(source, f"cpu id {cpu!r} is not an integer")
    if cpu < 0:
        raise CPUSetError(source, f"cpu id {cpu} is negative")
    if cpu > MAX_CPU_ID:
        raise CPUSetError(source, f"cpu id {cpu} is above {MAX_CPU_ID}")
    return cpu


def _parse_id(token: str, source: str) -> int:
    if not token or not token.isascii() or not token.isdigit():
        raise CPUSetError(source, f"{token!r} is not a cpu id")
    return _check_id(int(token), source)


def _range_mask(start: int, end: int) -> int:
    """Bits start..end inclusive."""
    return ((1 << (end - start + 1)) - 1) << start


class CPUSet:
    """An immutable, hashable set of cpu ids; iterates in ascending order."""

    __slots__ = ("_mask",)
    _mask: int

    def __init__(self, mask: int = 0) -> None:
        if mask < 0:
            raise CPUSetError(mask, "a bitmask cannot be negative")
        object.__setattr__(self, "_mask", mask)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("CPUSet is immutable")

    # -- construction -----------------------------------------------------------------

    @classmethod
    def parse(cls, text: str) -> CPUSet:
        """Read the Linux list format; surrounding whitespace and a newline are allowed."""
        if not isinstance(text, str):
            raise CPUSetError(text, "not a string")
        body = text.strip()
        if not body:
            return EMPTY
        mask = 0
        for item in body.split(","):
            if not item:
                raise CPUSetError(text, "empty item between commas")
            start_text, dash, end_text = item.partition("-")
            if dash and not start_text:
                raise CPUSetError(text, f"{item!r} has no range start (cpu ids are not negative)")
            start = _parse_id(start_text, text)
            if not dash:
                mask |= 1 << start
                continue
            end = _parse_id(end_text, text)
            if end < start:
                raise CPUSetError(text, f"range {item!r} ends before it starts")
            mask |= _range_mask(start, end)
        return cls(mask)

    @classmethod
    def of(cls, cpus: Iterable[int]) -> CPUSet:
        if isinstance(cpus, CPUSet):
            return cpus
        mask = 0
        for cpu in cpus:
            mask |= 1 << _check_id(cpu, cpu)
        return cls(mask)

    @classmethod
    def range(cls, start: int, stop: int) -> CPUSet:
        """cpus ``start`` .. ``stop - 1``, like :func:`range`."""
        _check_id(start, start)
        if stop <= start:
            return EMPTY
        _check_id(stop - 1, stop)
        return cls(_range_mask(start, stop - 1))

    @classmethod
    def from_mask(cls, mask: int) -> CPUSet:
        return cls(mask)

    @property
    def mask(self) -> int:
        return self._mask

    # -- reading ----------------------------------------------------------------------

    def __len__(self) -> int:
        return self._mask.bit_count()

    def __bool__(self) -> bool:
        return self._mask != 0

    def is_empty(self) -> bool:
        return self._mask == 0

    def __contains__(self, cpu: object) -> bool:
        if not isinstance(cpu, int) or cpu < 0:
            return False
        return bool((self._mask >> cpu) & 1)

    def __iter__(self) -> Iterator[int]:
        mask = self._mask
        while mask:
            low = mask & -mask
            yield low.bit_length() - 1
            mask ^= low

    def to_list(self) -> list[int]:
        return list(self)

    def min(self) -> int:
        if not self._mask:
            raise CPUSetError("", "an empty set has no smallest cpu")
        return (self._mask & -self._mask).bit_length() - 1

    def max(self) -> int:
        if not self._mask:
            raise CPUSetError("", "an empty set has no largest cpu")
        return self._mask.bit_length() - 1

    def first(self, n: int) -> CPUSet:
        """The ``n`` lowest-numbered cpus."""
        if n < 0 or n > len(self):
            raise CPUSetError(str(self), f"cannot take {n} cpus from a set of {len(self)}")
        mask = self._mask
        taken = 0
        for _ in range(n):
            low = mask & -mask
            taken |= low
            mask ^= low
        return CPUSet(taken)

    def ranges(self) -> list[tuple[int, int]]:
        """Maximal runs as inclusive ``(start, end)`` pairs, ascending."""
        result: list[tuple[int, int]] = []
        mask = self._mask
        while mask:
            start = (mask & -mask).bit_length() - 1
            # Adding the lowest bit of a run carries through the whole run.
            run_end_bit = ((mask >> start) + 1) & ~(mask >> start)
            length = run_end_bit.bit_length() - 1
            result.append((start, start + length - 1))
            mask &= ~_range_mask(start, start + length - 1)
        return result

    def __str__(self) -> str:
        return _list_format(self._mask)

    def __repr__(self) -> str:
        return f"CPUSet({str(self)!r})"

    # -- algebra ----------------------------------------------------------------------

    def __or__(self, other: CPUSet) -> CPUSet:
        if not isinstance(other, CPUSet):
            return NotImplemented
        return CPUSet(self._mask | other._mask)

    def __and__(self, other: CPUSet) -> CPUSet:
        if not isinstance(other, CPUSet):
            return NotImplemented
        return CPUSet(self._mask & other._mask)

    def __sub__(self, other: CPUSet) -> CPUSet:
        if not isinstance(other, CPUSet):
            return NotImplemented
        return CPUSet(self._mask & ~other._mask)

    def __xor__(self, other: CPUSet) -> CPUSet:
        if not isinstance(other, CPUSet):
            return NotImplemented
        return CPUSet(self._mask ^ other._mask)

    def union(self, *others: CPUSet) -> CPUSet:
        mask = self._mask
        for other in others:
            mask |= other._mask
        return CPUSet(mask)

    def intersection(self, *others: CPUSet) -> CPUSet:
        mask = self._mask
        for other in others:
            mask &= other._mask
        return CPUSet(mask)

    def difference(self, *others: CPUSet) -> CPUSet:
        mask = self._mask
        for other in others:
            mask &= ~other._mask
        return CPUSet(mask)

    def issubset(self, other: CPUSet) -> bool:
        return self._mask & ~other._mask == 0

    def issuperset(self, other: CPUSet) -> bool:
        return other._mask & ~self._mask == 0

    def isdisjoint(self, other: CPUSet) -> bool:
        return self._mask & other._mask == 0

    def __le__(self, other: CPUSet) -> bool:
        if not isinstance(other, CPUSet):
            return NotImplemented
        return self.issubset(other)

    def __ge__(self, other: CPUSet) -> bool:
        if not isinstance(other, CPUSet):
            return NotImplemented
        return self.issuperset(other)

    def __lt__(self, other: CPUSet) -> bool:
        if not isinstance(other, CPUSet):
            return NotImplemented
        return self._mask != other._mask and self.issubset(other)

    def __gt__(self, other: CPUSet) -> bool:
        if not isinstance(other, CPUSet):
            return NotImplemented
        return self._mask != other._mask and self.issuperset(other)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CPUSet):
            return NotImplemented
        return self._mask == other._mask

    def __hash__(self) -> int:
        return hash(("CPUSet", self._mask))

    def __reduce__(self) -> tuple[type[CPUSet], tuple[int]]:
        return (CPUSet, (self._mask,))


EMPTY: Final = CPUSet(0)


@functools.lru_cache(maxsize=8192)
def _list_format(mask: int) -> str:
    """The kernel's list format of a mask ("0-3,8"); an agent writes the same few cpusets
    into cgroups and annotations over and over, so each is formatted once."""
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in CPUSet(mask).ranges())
