"""The seating plan: which player sits in each seat of a game, from keys that name seats or roles.

Training (``seats:`` in a config), evaluation (a policy's seats against a scripted twin),
tournaments (``--fixed``, ``--sides``, players bound to a role) and leagues (a snapshot in the
league seats) all say who plays where the same way: a mapping whose keys are seat names or role
names, where a seat's own key beats its role's. :func:`seats_of` and :func:`assign` read such a
mapping against a game and refuse, with the same words everywhere, a key the game does not have
or a seat nobody plays. :class:`Seating` turns the plan into the ``(seat, role) -> (player id,
agent)`` map the play loop asks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from cogym.core.errors import ConfigError
from cogym.core.names import did_you_mean

T = TypeVar("T")


class SeatingError(ConfigError):
    """Who plays where does not fit the game: a key that is no seat or role of it, a seat nobody plays,
    a scripted twin its role does not have, or a seat map a backend cannot play. The message names the
    key (``seats.<role>``, ``league.seats``, ``--fixed ...``) it came from. A ConfigError, as it was
    before it had a class of its own, so code that catches ConfigError still catches it."""


def _roles(game: Any) -> list[str]:
    return list(game.spec.roles)


def unknown_key(game: Any, key: str, what: str) -> SeatingError:
    """The error for a key that is neither a seat nor a role of ``game`` (naming the closest one)."""
    hint = did_you_mean(key, [*_roles(game), *game.possible_agents], form="; did you mean {}?")
    return SeatingError(f"{what}: {game.spec.id} has no role or seat {key!r} (roles: {', '.join(_roles(game))}; "
                       f"seats: {', '.join(game.possible_agents)}){hint}")


def seats_of(game: Any, names: Iterable[str], what: str) -> list[str]:
    """The seats that seat or role ``names`` stand for, in the game's seat order.

    ``what`` names the setting in the error for a name the game does not have (``"--fixed judge"``)."""
    seats = list(game.possible_agents)
    roles = set(_roles(game))
    out: set[str] = set()
    for name in names:
        if name in seats:
            out.add(name)
        elif name in roles:
            out |= {s for s in seats if game.role_of(s) == name}
        else:
            raise unknown_key(game, name, what)
    return [s for s in seats if s in out]


def key_of(game: Any, seat: str, mapping: Mapping[str, Any]) -> str | None:
    """The key of ``mapping`` that decides ``seat``: the seat's own, else its role's, else None."""
    if seat in mapping:
        return seat
    role = game.role_of(seat)
    return role if role in mapping else None


def assign(game: Any, mapping: Mapping[str, T], what: str, *, seats: Iterable[str] | None = None,
           missing: str | None = None) -> dict[str, T]:
    """seat -> value for each seat of ``seats`` (default: every seat), from keys naming seats or roles.

    Every key must be a seat or a role of the game (else :class:`SeatingError` naming ``what.key``). A seat
    no key covers raises :class:`SeatingError` with ``missing`` (formatted with ``seat`` and ``role``) when
    given, and is left out otherwise."""
    for key in mapping:
        seats_of(game, [key], f"{what}.{key}" if what else key)
    out: dict[str, T] = {}
    for seat in (game.possible_agents if seats is None else seats):
        key = key_of(game, seat, mapping)
        if key is None:
            if missing is not None:
                raise SeatingError(missing.format(seat=seat, role=game.role_of(seat)))
            continue
        out[seat] = mapping[key]
    return out


@dataclass(frozen=True)
class Seating:
    """A game's seat map for the play loop: seat -> (player id, agent), fixed for the whole rollout."""

    players: Mapping[str, tuple[str, Any]]

    def __call__(self, seat: str, role: str) -> tuple[str, Any]:
        return self.players[seat]
