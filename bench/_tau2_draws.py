"""Random calls of tau2-bench's tools for bench/tau2_differential.py: per domain, a drawer that builds a sequence of
calls about one user from tau2's base database, valid and invalid arguments alike, seeded by the `random.Random` it is
given (the same seed, the same sequences).

`DRAWS[domain](db, rng).sequence(calls)` is one sequence: `calls` calls `{"tool": name, "arguments": {...}}`, the
tool drawn by its weight, its arguments by the tool's own drawer (ids that exist and ids that do not; retail's
orders in each status, item ids in and out of the order, payment methods of the user's and another's; airline's
bookings, flight and cabin changes, bags, passengers, certificates and searches, priced right or wrong; `calculate`
expressions that are arithmetic, malformed or hold bad characters).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

__all__ = ["DRAWS", "AirlineDraws", "Call", "RetailDraws"]

Call = dict[str, Any]  # {"tool": name, "arguments": {...}}


def _maybe(rng: random.Random, p: float) -> bool:
    return rng.random() < p


def _case_changed(rng: random.Random, text: str) -> str:
    return rng.choice([text.upper(), text.lower(), text.swapcase(), text.title(), text])


_CITIES = [("Austin", "TX", "78701"), ("Denver", "CO", "80202"), ("São Paulo", "SP", "01000-000"), ("", "", "")]
_STREETS = ["1 Main St", "742 Evergreen Terrace", '12 O\'Neil "Quoted" Road', "Rua Açaí, 5", ""]


def _address(rng: random.Random) -> dict[str, str]:
    city, state, zip_code = rng.choice(_CITIES)
    return {
        "address1": rng.choice(_STREETS),
        "address2": rng.choice(["", "Apt 1", "Suite 200", "Unit ☃"]),
        "city": city,
        "state": state,
        "country": rng.choice(["USA", "Brazil", "usa"]),
        "zip": zip_code if _maybe(rng, 0.8) else rng.choice(["00000", "1234", ""]),
    }


def _number(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.5:
        return str(rng.randint(0, 999))
    if kind < 0.85:
        return f"{rng.randint(0, 999)}.{rng.randint(0, 99):02d}"
    return rng.choice(["0", "0.1", "0.2", "0.3", "2.675", "1.005", "0.125", "1000000", "3"])


def _arithmetic(rng: random.Random, depth: int = 0) -> str:
    if depth > 2 or _maybe(rng, 0.4):
        return _number(rng)
    left, right = _arithmetic(rng, depth + 1), _arithmetic(rng, depth + 1)
    op = rng.choice(["+", "-", "*", "/", " + ", " - ", " * ", " / "])
    text = f"{left}{op}{right}"
    return f"({text})" if _maybe(rng, 0.3) else text


_MALFORMED = [
    "",
    "   ",
    "1 +",
    "(1 + 2",
    "1 + 2)",
    "1 2",
    "1..2",
    "* 2",
    "1 / 0",
    "1 / 0.0",
    "(3 - 3) / (2 - 2)",
    "()",
    "2 ** 3",
    "7 // 2",
    "012 + 1",
    ".5 + 1",
    "5. * 2",
    "--5",
    "+1",
    "-(-5)",
    "10 ** 400",
    "9" * 40,
    "123456789 * 987654321",
    "1 / 7000000",
    "2 /* 3 */ 4",
    "(1 2)",
    "1 (2)",
    "(*1)",
    "...",
    "-0.0",
    "0 * -1.0",
    "2 ** -1",
    "-2 ** 2",
    "1 // 0.1",
    "(-8) ** 0.5",
    "10.0 ** 400",
    "1" + "0" * 308 + ".0 * 10",
]
_BAD_CHARACTERS = ["2 ^ 3", "2 x 3", "abs(-1)", "1e3", "1,000 + 2", "$5 + 1", "sqrt(4)", "2 % 3", "1 + 1 = 2", "½ + 1"]


def _expression(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.6:
        return _arithmetic(rng)
    if kind < 0.85:
        return rng.choice(_MALFORMED)
    return rng.choice(_BAD_CHARACTERS)


class RetailDraws:
    """Calls of tau2's retail tools, their arguments drawn from the base database, about one user a sequence."""

    def __init__(self, db: dict[str, Any], rng: random.Random) -> None:
        self.db, self.rng = db, rng
        self.users = sorted(db["users"])
        self.orders = sorted(db["orders"])
        self.products = sorted(db["products"])
        self.by_status: dict[str, list[str]] = {}
        for order_id in self.orders:
            self.by_status.setdefault(db["orders"][order_id]["status"], []).append(order_id)
        self.with_gift_card = [u for u in self.users if self._methods(u, "gift_card")]
        self.several_methods = [u for u in self.users if len(self._methods(u)) > 1]
        several = set(self.several_methods)
        self.pending_of_several = [o for o in self.by_status["pending"] if db["orders"][o]["user_id"] in several]
        self.all_methods = sorted(m for u in db["users"].values() for m in u["payment_methods"])
        self.tools: dict[str, tuple[float, Callable[[str], dict[str, Any]]]] = {
            "calculate": (0.6, lambda u: {"expression": _expression(self.rng)}),
            "cancel_pending_order": (1.0, self.cancel),
            "exchange_delivered_order_items": (1.2, self.exchange),
            "find_user_id_by_email": (0.6, self.email),
            "find_user_id_by_name_zip": (0.6, self.name_zip),
            "get_order_details": (1.2, lambda u: {"order_id": self.order_id(u)}),
            "get_product_details": (0.6, self.product),
            "get_user_details": (0.8, lambda u: {"user_id": self.user_id(u)}),
            "list_all_product_types": (0.2, lambda u: {}),
            "modify_pending_order_address": (0.8, self.modify_address),
            "modify_pending_order_items": (1.4, self.modify_items),
            "modify_pending_order_payment": (1.0, self.modify_payment),
            "modify_user_address": (0.5, lambda u: {"user_id": self.user_id(u), **_address(self.rng)}),
            "return_delivered_order_items": (1.2, self.return_items),
            "transfer_to_human_agents": (0.2, lambda u: {"summary": self.rng.choice(["", "wants a refund", "é ✓"])}),
        }

    def sequence(self, calls: int) -> list[Call]:
        rng = self.rng
        user = rng.choice(rng.choices([self.several_methods, self.with_gift_card, self.users], [0.5, 0.25, 0.25])[0])
        names = list(self.tools)
        weights = [self.tools[n][0] for n in names]
        return [
            {"tool": (n := rng.choices(names, weights)[0]), "arguments": self.tools[n][1](user)} for _ in range(calls)
        ]

    def _methods(self, user_id: str, source: str | None = None) -> list[str]:
        methods = self.db["users"][user_id]["payment_methods"]
        return sorted(m for m, v in methods.items() if source is None or v["source"] == source)

    def user_id(self, user: str) -> str:
        roll = self.rng.random()
        if roll < 0.75:
            return user
        if roll < 0.85:
            return self.rng.choice(self.users)
        return self.rng.choice([user.upper(), user + "_", "no_such_user_1", ""])

    def order_id(self, user: str) -> str:
        rng, roll = self.rng, self.rng.random()
        mine = self.db["users"][user]["orders"]
        if roll < 0.7 and mine:
            return str(rng.choice(mine))
        if roll < 0.85:
            return rng.choice(self.by_status[rng.choice(sorted(self.by_status))])
        if roll < 0.92:
            return rng.choice(self.orders)
        return rng.choice(["#W0000000", (mine or self.orders)[0].lstrip("#"), "", "#w" + self.orders[0][2:]])

    def _order_of(self, user: str, statuses: tuple[str, ...], others: list[str] | None = None) -> str:
        """Mostly one of the user's orders in one of `statuses`, else another user's (from `others` when given),
        else any order id (good or bad)."""
        mine = [o for o in self.db["users"][user]["orders"] if self.db["orders"].get(o, {}).get("status") in statuses]
        if mine and _maybe(self.rng, 0.75):
            return str(self.rng.choice(mine))
        if others is None:
            others = [o for s in statuses for o in self.by_status.get(s, [])]
        if others and _maybe(self.rng, 0.7):
            return self.rng.choice(others)
        return self.order_id(user)

    def _items(self, order_id: str) -> list[str]:
        order = self.db["orders"].get(order_id)
        return [i["item_id"] for i in order["items"]] if order else []

    def _variant_of(self, item_id: str, order_id: str) -> str:
        """A new item id for `item_id`: mostly another available variant of its product, else one not available,
        the same item, another product's variant or no variant at all."""
        rng = self.rng
        order = self.db["orders"].get(order_id)
        product = next((i["product_id"] for i in order["items"] if i["item_id"] == item_id), None) if order else None
        variants = self.db["products"][product]["variants"] if product is not None else {}
        available = sorted(v for v, record in variants.items() if record["available"] and v != item_id)
        unavailable = sorted(v for v, record in variants.items() if not record["available"])
        roll = rng.random()
        if available and roll < 0.75:
            return rng.choice(available)
        if unavailable and roll < 0.83:
            return rng.choice(unavailable)
        if roll < 0.9:
            return item_id
        if roll < 0.95:
            return rng.choice(sorted(self.db["products"][rng.choice(self.products)]["variants"]))
        return rng.choice(["1234567890", product or "0", ""])

    def _item_ids(self, order_id: str) -> list[str]:
        """Mostly one or two of the order's items; sometimes none, a duplicate, or an item the order lacks."""
        rng = self.rng
        items = self._items(order_id)
        if not items or _maybe(rng, 0.04):
            return [] if _maybe(rng, 0.5) else ["1234567890"]
        count = rng.choices([1, 2, len(items)], [0.6, 0.25, 0.15])[0]
        chosen = rng.sample(items, min(count, len(items)))
        if _maybe(rng, 0.08):
            chosen.append(rng.choice(chosen))  # a duplicate (more than the order holds, unless it holds two)
        if _maybe(rng, 0.05):
            chosen.insert(rng.randrange(len(chosen) + 1), rng.choice(["1234567890", *self._items(self.orders[0])]))
        return chosen

    def _pairs(self, order_id: str) -> tuple[list[str], list[str]]:
        old = self._item_ids(order_id)
        new = [self._variant_of(i, order_id) for i in old]
        if _maybe(self.rng, 0.05):  # lists of different lengths
            if new and _maybe(self.rng, 0.5):
                new.pop()
            else:
                new.append(self._variant_of(old[0], order_id) if old else "1234567890")
        return old, new

    def payment_method(self, user: str, order_id: str) -> str:
        """Mostly a payment method of the order's owner other than the one it was paid with; else that one, one
        of the owner's gift cards (often too low a balance), another user's, or none."""
        rng = self.rng
        order = self.db["orders"].get(order_id)
        owner = order["user_id"] if order else user
        paid = order["payment_history"][0]["payment_method_id"] if order else None
        others = [m for m in self._methods(owner) if m != paid]
        roll = rng.random()
        if roll < 0.55 and others:
            return rng.choice(others)
        if roll < 0.7 and paid is not None:
            return str(paid)
        if roll < 0.85 and self._methods(owner, "gift_card"):
            return rng.choice(self._methods(owner, "gift_card"))
        if roll < 0.95:
            return rng.choice(self.all_methods)
        return rng.choice(["credit_card_0000000", "gift_card_0000000", ""])

    def cancel(self, user: str) -> dict[str, Any]:
        reason = ["no longer needed", "ordered by mistake"]
        bad = ["No longer needed", "other", "", "ordered by mistake "]
        return {
            "order_id": self._order_of(user, ("pending",)),
            "reason": self.rng.choice(reason if _maybe(self.rng, 0.85) else bad),
        }

    def exchange(self, user: str) -> dict[str, Any]:
        order_id = self._order_of(user, ("delivered",))
        old, new = self._pairs(order_id)
        pay = self.payment_method(user, order_id)
        return {"order_id": order_id, "item_ids": old, "new_item_ids": new, "payment_method_id": pay}

    def modify_items(self, user: str) -> dict[str, Any]:
        order_id = self._order_of(user, ("pending",))
        old, new = self._pairs(order_id)
        pay = self.payment_method(user, order_id)
        return {"order_id": order_id, "item_ids": old, "new_item_ids": new, "payment_method_id": pay}

    def modify_address(self, user: str) -> dict[str, Any]:
        return {"order_id": self._order_of(user, ("pending", "pending (item modified)")), **_address(self.rng)}

    def modify_payment(self, user: str) -> dict[str, Any]:
        order_id = self._order_of(user, ("pending", "pending (item modified)"), self.pending_of_several)
        return {"order_id": order_id, "payment_method_id": self.payment_method(user, order_id)}

    def return_items(self, user: str) -> dict[str, Any]:
        order_id = self._order_of(user, ("delivered",))
        pay = self.payment_method(user, order_id)
        return {"order_id": order_id, "item_ids": self._item_ids(order_id), "payment_method_id": pay}

    def email(self, user: str) -> dict[str, Any]:
        rng = self.rng
        email = self.db["users"][user if _maybe(rng, 0.85) else rng.choice(self.users)]["email"]
        roll = rng.random()
        if roll < 0.75:
            return {"email": _case_changed(rng, email)}
        return {"email": rng.choice([" " + email, email.replace("@", "@@"), "nobody@example.com", ""])}

    def name_zip(self, user: str) -> dict[str, Any]:
        rng = self.rng
        record = self.db["users"][user]
        first, last, zip_code = record["name"]["first_name"], record["name"]["last_name"], record["address"]["zip"]
        roll = rng.random()
        if roll < 0.5:
            return {"first_name": first, "last_name": last, "zip": zip_code}
        if roll < 0.75:
            return {"first_name": _case_changed(rng, first), "last_name": _case_changed(rng, last), "zip": zip_code}
        if roll < 0.9:
            return {"first_name": first, "last_name": last, "zip": rng.choice(["00000", zip_code + " ", ""])}
        return {"first_name": "Nobody", "last_name": last, "zip": zip_code}

    def product(self, user: str) -> dict[str, Any]:
        rng, roll = self.rng, self.rng.random()
        orders = [self.db["orders"][o] for o in self.db["users"][user]["orders"] if o in self.db["orders"]]
        if roll < 0.6 and orders:
            return {"product_id": rng.choice(rng.choice(orders)["items"])["product_id"]}
        if roll < 0.8:
            return {"product_id": rng.choice(self.products)}
        if roll < 0.9 and orders:
            return {"product_id": rng.choice(rng.choice(orders)["items"])["item_id"]}  # an item id, not a product's
        return {"product_id": rng.choice(["0000000000", "", "product"])}


class AirlineDraws:
    """Calls of tau2's airline tools, their arguments drawn from the base database, about one user a sequence."""

    def __init__(self, db: dict[str, Any], rng: random.Random) -> None:
        self.db, self.rng = db, rng
        self.users = sorted(db["users"])
        self.reservations = sorted(db["reservations"])
        self.flights = sorted(db["flights"])
        self.dates = sorted({d for f in db["flights"].values() for d in f["dates"]})
        self.airports = sorted({f[end] for f in db["flights"].values() for end in ("origin", "destination")})
        self.routes: dict[tuple[str, str], list[str]] = {}
        for number in self.flights:
            flight = db["flights"][number]
            self.routes.setdefault((flight["origin"], flight["destination"]), []).append(number)
        self.available = [
            (n, d) for n in self.flights for d, day in db["flights"][n]["dates"].items() if day["status"] == "available"
        ]
        self.all_methods = sorted(m for u in db["users"].values() for m in u["payment_methods"])
        self.tools: dict[str, tuple[float, Callable[[str], dict[str, Any]]]] = {
            "book_reservation": (1.5, self.book),
            "calculate": (0.3, lambda u: {"expression": _expression(self.rng)}),
            "cancel_reservation": (0.8, lambda u: {"reservation_id": self.reservation_id(u)}),
            "get_flight_status": (0.6, self.flight_status),
            "get_reservation_details": (1.0, lambda u: {"reservation_id": self.reservation_id(u)}),
            "get_user_details": (0.8, lambda u: {"user_id": self.user_id(u)}),
            "list_all_airports": (0.1, lambda u: {}),
            "search_direct_flight": (0.6, self.search),
            "search_onestop_flight": (0.4, self.search),
            "send_certificate": (0.5, self.certificate),
            "transfer_to_human_agents": (0.1, lambda u: {"summary": self.rng.choice(["", "wants a refund", "é ✓"])}),
            "update_reservation_baggages": (1.0, self.baggages),
            "update_reservation_flights": (1.2, self.update_flights),
            "update_reservation_passengers": (0.8, self.passengers),
        }

    def sequence(self, calls: int) -> list[Call]:
        rng = self.rng
        user = rng.choice(
            [u for u in self.users if self.db["users"][u]["reservations"]] if _maybe(rng, 0.8) else self.users
        )
        names = list(self.tools)
        weights = [self.tools[n][0] for n in names]
        return [
            {"tool": (n := rng.choices(names, weights)[0]), "arguments": self.tools[n][1](user)} for _ in range(calls)
        ]

    def user_id(self, user: str) -> str:
        roll = self.rng.random()
        if roll < 0.8:
            return user
        if roll < 0.9:
            return self.rng.choice(self.users)
        return self.rng.choice([user.upper(), "no_such_user_1", ""])

    def reservation_id(self, user: str) -> str:
        rng, roll = self.rng, self.rng.random()
        mine = self.db["users"][user]["reservations"]
        if roll < 0.7 and mine:
            return str(rng.choice(mine))
        if roll < 0.8:
            return rng.choice(self.reservations)
        if roll < 0.9:
            return rng.choice(["HATHAT", "HATHAU"])  # what this sequence's bookings are named
        return rng.choice(["ZZZZZZ", self.reservations[0].lower(), ""])

    def payment_id(self, user: str) -> str:
        rng, roll = self.rng, self.rng.random()
        methods = sorted(self.db["users"][user]["payment_methods"]) if user in self.db["users"] else []
        if roll < 0.8 and methods:
            return rng.choice(methods)
        if roll < 0.9:
            return rng.choice(self.all_methods)
        return rng.choice(["credit_card_0000000", "certificate_3221322", ""])

    def _owner(self, reservation_id: str, user: str) -> str:
        record = self.db["reservations"].get(reservation_id)
        return str(record["user_id"]) if record else user

    def _date(self) -> str:
        return (
            self.rng.choice(self.dates) if _maybe(self.rng, 0.85) else self.rng.choice(["2024-06-01", "2024-5-1", ""])
        )

    def search(self, user: str) -> dict[str, Any]:
        rng, roll = self.rng, self.rng.random()
        if roll < 0.75:
            origin, destination = rng.choice(sorted(self.routes))
            if _maybe(rng, 0.4):  # a destination one stop away, as often as a direct one
                destination = rng.choice(sorted({d for o, d in self.routes if o == destination} or {destination}))
        elif roll < 0.92:
            origin, destination = rng.sample(self.airports, 2)
        else:
            origin, destination = rng.choice([("XXX", "JFK"), ("jfk", "lax"), ("", "")])
        return {"origin": origin, "destination": destination, "date": self._date()}

    def flight_status(self, user: str) -> dict[str, Any]:
        roll = self.rng.random()
        number = self.rng.choice(self.flights) if roll < 0.9 else self.rng.choice(["HAT999", "hat001", ""])
        return {"flight_number": number, "date": self._date()}

    def certificate(self, user: str) -> dict[str, Any]:
        return {"user_id": self.user_id(user), "amount": self.rng.choice([50, 100, 150, 0, -10, 1_000_000])}

    def baggages(self, user: str) -> dict[str, Any]:
        rng = self.rng
        reservation = self.reservation_id(user)
        record = self.db["reservations"].get(reservation, {"total_baggages": 0, "nonfree_baggages": 0})
        total = max(0, record["total_baggages"] + rng.choice([-1, 0, 1, 2]))
        nonfree = record["nonfree_baggages"] + rng.choice([-1, 0, 0, 1, 2, 3])
        return {
            "reservation_id": reservation,
            "total_baggages": total,
            "nonfree_baggages": nonfree,
            "payment_id": self.payment_id(self._owner(reservation, user)),
        }

    def _leg(self, origin: str, destination: str, date: str | None = None) -> dict[str, Any]:
        """A flight on the route: mostly on a date it is available, else any date it has, or none it has."""
        rng = self.rng
        numbers = self.routes.get((origin, destination)) or [rng.choice(self.flights)]
        number = rng.choice(numbers)
        days = self.db["flights"][number]["dates"]
        open_days = sorted(d for d, day in days.items() if day["status"] == "available")
        roll = rng.random()
        if date is not None and roll < 0.5:
            return {"flight_number": number, "date": date}
        if roll < 0.8 and open_days:
            return {"flight_number": number, "date": rng.choice(open_days)}
        if roll < 0.93:
            return {"flight_number": number, "date": rng.choice(sorted(days))}
        return rng.choice(
            [{"flight_number": "HAT999", "date": "2024-05-20"}, {"flight_number": number, "date": "2024-06-30"}]
        )

    def update_flights(self, user: str) -> dict[str, Any]:
        rng = self.rng
        reservation = self.reservation_id(user)
        record = self.db["reservations"].get(reservation)
        if record is None:
            legs = [self._leg(*rng.choice(sorted(self.routes)))]
            cabin = "economy"
        else:
            legs = [{"flight_number": f["flight_number"], "date": f["date"]} for f in record["flights"]]
            cabin = record["cabin"]
            if _maybe(rng, 0.6):
                at = rng.randrange(len(legs))
                old = record["flights"][at]
                legs[at] = self._leg(old["origin"], old["destination"], old["date"])
            if _maybe(rng, 0.05):
                legs = legs[:-1] if len(legs) > 1 else [*legs, legs[0]]
        if _maybe(rng, 0.4):
            cabin = rng.choice(["business", "economy", "basic_economy"])
        return {
            "reservation_id": reservation,
            "cabin": cabin,
            "flights": legs,
            "payment_id": self.payment_id(self._owner(reservation, user)),
        }

    def _person(self, user: str) -> dict[str, Any]:
        record = self.db["users"].get(user) or self.db["users"][self.users[0]]
        saved = record["saved_passengers"]
        if saved and _maybe(self.rng, 0.5):
            return dict(self.rng.choice(saved))
        return {
            "first_name": record["name"]["first_name"],
            "last_name": record["name"]["last_name"],
            "dob": record["dob"],
        }

    def passengers(self, user: str) -> dict[str, Any]:
        rng = self.rng
        reservation = self.reservation_id(user)
        record = self.db["reservations"].get(reservation)
        people = [dict(p) for p in record["passengers"]] if record else [self._person(user)]
        if people and _maybe(rng, 0.6):
            people[rng.randrange(len(people))] = self._person(user) | {"first_name": rng.choice(["Ana", "José", "Li"])}
        if _maybe(rng, 0.15):
            people = people[:-1] if len(people) > 1 and _maybe(rng, 0.5) else [*people, self._person(user)]
        if people and _maybe(rng, 0.05):
            people[0] = rng.choice([{"first_name": "Ana", "last_name": "Lee"}, {**people[0], "age": 30}])
        return {"reservation_id": reservation, "passengers": people}

    def book(self, user: str) -> dict[str, Any]:
        rng = self.rng
        number, date = rng.choice(self.available)
        flight = self.db["flights"][number]
        origin, destination = flight["origin"], flight["destination"]
        legs = [{"flight_number": number, "date": date}]
        round_trip = _maybe(rng, 0.4)
        if round_trip:
            legs.append(self._leg(destination, origin, date))
        if _maybe(rng, 0.1):
            legs[0] = self._leg(origin, destination)
        cabin = rng.choice(["business", "economy", "basic_economy"])
        people = [self._person(user) for _ in range(rng.choice([1, 1, 2, 3]))]
        insurance = rng.choice(["yes", "no"])
        total_bags = rng.choice([0, 1, 2, 3])
        nonfree = rng.choice([0, 0, 1, 2])
        price = 0
        for leg in legs:
            day = self.db["flights"].get(leg["flight_number"], {}).get("dates", {}).get(leg["date"], {})
            price += day.get("prices", {}).get(cabin, 0) * len(people)
        price += (30 * len(people) if insurance == "yes" else 0) + 50 * nonfree
        return {
            "user_id": self.user_id(user),
            "origin": origin,
            "destination": destination,
            "flight_type": "round_trip" if round_trip else "one_way",
            "cabin": cabin,
            "flights": legs,
            "passengers": people,
            "payment_methods": self._payments(user, price),
            "total_baggages": total_bags,
            "nonfree_baggages": nonfree,
            "insurance": insurance,
        }

    def _payments(self, user: str, price: int) -> list[dict[str, Any]]:
        """Mostly the price paid with one of the user's methods, or split with a gift card or certificate; else a
        wrong total, another user's method, or a payment pydantic must coerce or refuse."""
        rng, roll = self.rng, self.rng.random()
        methods = self.db["users"][user]["payment_methods"]
        cards = sorted(m for m, v in methods.items() if v["source"] == "credit_card")
        stored = sorted(m for m, v in methods.items() if v["source"] != "credit_card")
        first = rng.choice(cards or sorted(methods))
        if roll < 0.45:
            return [{"payment_id": rng.choice(sorted(methods)), "amount": price}]
        if roll < 0.7 and stored:
            part = min(price, int(methods[(kept := rng.choice(stored))]["amount"]) + rng.choice([0, 0, 1]))
            return [{"payment_id": kept, "amount": part}, {"payment_id": first, "amount": price - part}]
        if roll < 0.82:
            return [{"payment_id": first, "amount": price + rng.choice([-1, 1, 100])}]
        if roll < 0.92:
            return [{"payment_id": rng.choice(self.all_methods), "amount": price}]
        return [rng.choice([{"payment_id": first, "amount": str(price)}, {"payment_id": first}, {"amount": price}])]


DRAWS: dict[str, Callable[[dict[str, Any], random.Random], Any]] = {"retail": RetailDraws, "airline": AirlineDraws}
