"""A tiny calculator library: the repository of the example episode."""


def mean(values):
    """The arithmetic mean of values; ValueError for no values."""
    if not values:
        raise ValueError("mean of no values")
    return sum(values) / len(values)


def median(values):
    """The median of values; ValueError for no values."""
    if not values:
        raise ValueError("median of no values")
    s = sorted(values)
    mid = len(s) // 2
    return s[mid]
