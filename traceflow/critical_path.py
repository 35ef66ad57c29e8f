"""Placeholder, replaced below."""


def compute(con):
    pass
