"""Retail worlds the size of real databases, and a fake simulator that answers their tools.

`world_dir(scale, seed)` writes (once, cached under `.bench-cache/`) a world in the shape of tau2-bench's
retail domain: users, orders and products as objects keyed by id, at `scale` times the size of tau2's
database (1x: 500 users, 1,000 orders, 50 products of 30-60 variants each, 2.0 MB of compact JSON; 16x:
32 MB, made in about 2 s). The records are made up here, deterministically from the seed. `RetailSimulator`
answers the simulator's requests for these worlds (and for the shipped tiny `retail` world) as a flawless
model would, and counts how often the records a call names reached its prompt whole.

    python bench/_retail_scale.py generate --scale 16 [--seed 0]    # write (or find) a world, print its folder
    python bench/_retail_scale.py fake --port P --world DIR [--latency S]  # a lean fake provider for it
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import product as cartesian
from math import prod
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".bench-cache" / "retail-worlds"
GENERATOR_VERSION = 3  # part of the cache key: bump it when the records change

__all__ = ["CACHE", "RetailIndex", "RetailSimulator", "address", "covers", "load_state", "world_dir", "world_name"]

# fmt: off
FIRST = [
    "Mia", "Omar", "Lena", "Noah", "Aisha", "Liam", "Sofia", "Mateo", "Yuki", "Ethan", "Chloe", "Ravi", "Amara",
    "Lucas", "Ingrid", "Diego", "Hana", "Felix", "Zara", "Owen", "Priya", "Jonas", "Elena", "Kofi", "Maya", "Arjun",
    "Nora", "Samuel", "Leila", "Hugo", "Isabel", "Tariq", "Freya", "Daniel", "Mei", "Victor", "Anya", "Malik",
    "Clara", "Emeka", "Rosa", "Ivan", "Fatima", "Theo", "Lucia", "Kenji", "Grace", "Yusuf", "Olivia", "Marco",
    "Amelia", "Sven", "Layla", "Jamal", "Emma", "Hiroshi", "Ava", "Carlos", "Nadia", "Ben", "Sara", "Tomas", "Ines",
    "Kwame", "Julia", "Raj", "Eva", "Andre", "Lila", "Oscar", "Vera", "Leon", "Alma", "Sanjay", "Iris", "Dmitri",
    "Zoe", "Pablo",
]
LAST = [
    "Lee", "Haddad", "Kraus", "Garcia", "Patel", "Nguyen", "Silva", "Kim", "Okafor", "Rossi", "Novak", "Sato",
    "Fischer", "Moreau", "Ahmed", "Cohen", "Jensen", "Lopez", "Brown", "Ivanova", "Mensah", "Costa", "Berg",
    "Tanaka", "Muller", "Khan", "Dubois", "Santos", "Walsh", "Park", "Hughes", "Romero", "Lindqvist", "Chen",
    "Mwangi", "Kowalski", "Yilmaz", "Reyes", "Schmidt", "Ito", "Adeyemi", "Bianchi", "Larsen", "Morales", "Singh",
    "Murphy", "Volkov", "Ortiz", "Nakamura", "Weber", "Diaz", "Hansen", "Ali", "Sorensen", "Gomez", "Wright",
    "Popescu", "Castillo", "Shah", "Turner", "Petrov", "Alvarez", "Young", "Kapoor", "Baker", "Horvat", "Ramos",
]
CITIES = [  # (city, state, first three digits of its zip codes)
    ("Austin", "TX", "787"), ("Houston", "TX", "770"), ("Dallas", "TX", "752"), ("Portland", "OR", "972"),
    ("Denver", "CO", "802"), ("Seattle", "WA", "981"), ("Phoenix", "AZ", "850"), ("Chicago", "IL", "606"),
    ("Boston", "MA", "021"), ("New York", "NY", "100"), ("Brooklyn", "NY", "112"), ("Philadelphia", "PA", "191"),
    ("Pittsburgh", "PA", "152"), ("Atlanta", "GA", "303"), ("Miami", "FL", "331"), ("Tampa", "FL", "336"),
    ("Orlando", "FL", "328"), ("Charlotte", "NC", "282"), ("Raleigh", "NC", "276"), ("Nashville", "TN", "372"),
    ("Columbus", "OH", "432"), ("Cleveland", "OH", "441"), ("Detroit", "MI", "482"), ("Minneapolis", "MN", "554"),
    ("Milwaukee", "WI", "532"), ("Kansas City", "MO", "641"), ("St. Louis", "MO", "631"), ("Omaha", "NE", "681"),
    ("Salt Lake City", "UT", "841"), ("Las Vegas", "NV", "891"), ("San Diego", "CA", "921"),
    ("Los Angeles", "CA", "900"), ("San Francisco", "CA", "941"), ("San Jose", "CA", "951"),
    ("Sacramento", "CA", "958"), ("Albuquerque", "NM", "871"), ("Baltimore", "MD", "212"), ("Richmond", "VA", "232"),
    ("Indianapolis", "IN", "462"), ("Louisville", "KY", "402"), ("New Orleans", "LA", "701"), ("Boise", "ID", "837"),
]
STREETS = [
    "Elm", "Oak", "Maple", "Cedar", "Pine", "Birch", "Willow", "Chestnut", "Walnut", "Spruce", "Aspen", "Laurel",
    "Magnolia", "Hickory", "Juniper", "Sycamore", "Park", "Lake", "River", "Hill", "Forest", "Meadow", "Sunset",
    "Highland", "Harbor", "Mill", "Church", "Market", "Bridge", "Spring", "Valley", "Ridge", "Grove",
]
STREET_KINDS = ["Street", "Avenue", "Road", "Lane", "Drive", "Court", "Place", "Boulevard", "Way"]
COLORS = ["black", "white", "red", "blue", "green", "grey", "silver", "navy", "beige", "purple", "yellow", "orange"]
TYPES: list[tuple[str, float, dict[str, list[str]]]] = [  # (product type, base price, option values)
    ("T-Shirt", 25, {"color": COLORS[:6], "size": ["S", "M", "L", "XL", "XXL"], "material": ["cotton", "polyester",
     "linen"], "style": ["crew neck", "v-neck"]}),
    ("Running Shoes", 110, {"size": [str(s) for s in range(6, 14)], "color": COLORS[:5], "material": ["mesh",
     "leather", "synthetic"], "sole": ["rubber", "EVA"]}),
    ("Laptop", 1100, {"screen size": ["13-inch", "14-inch", "15-inch", "16-inch"], "processor": ["i5", "i7", "i9",
     "M-series"], "ram": ["8GB", "16GB", "32GB"], "storage": ["256GB SSD", "512GB SSD", "1TB SSD"],
     "color": ["silver", "space grey", "black"]}),
    ("Mechanical Keyboard", 140, {"switch type": ["linear", "tactile", "clicky"], "backlight": ["none", "white",
     "RGB"], "size": ["full size", "80%", "60%"]}),
    ("Water Bottle", 28, {"capacity": ["500ml", "750ml", "1000ml"], "material": ["stainless steel", "plastic",
     "glass"], "color": COLORS[:6]}),
    ("Desk Lamp", 60, {"color": COLORS[:4], "brightness": ["low", "medium", "high"], "power source": ["AC adapter",
     "USB", "battery"]}),
    ("Backpack", 80, {"color": COLORS[:6], "size": ["small", "medium", "large"], "material": ["nylon", "polyester",
     "leather"], "compartment": ["laptop", "hydration", "camera"]}),
    ("Headphones", 150, {"type": ["over-ear", "on-ear", "in-ear"], "connectivity": ["wired", "wireless"],
     "color": COLORS[:6]}),
    ("Coffee Maker", 90, {"capacity": ["1 cup", "4 cups", "8 cups", "12 cups"], "type": ["drip", "espresso",
     "french press"], "features": ["timer", "auto shutoff", "built-in grinder"]}),
    ("Smart Watch", 260, {"color": COLORS[:5], "band material": ["silicone", "leather", "metal"],
     "display": ["LCD", "AMOLED"], "case size": ["40mm", "44mm"]}),
    ("Office Chair", 320, {"material": ["mesh", "fabric", "leather"], "color": COLORS[:5], "armrest": ["none",
     "fixed", "adjustable"], "backrest height": ["standard", "high-back"]}),
    ("Yoga Mat", 35, {"thickness": ["4mm", "6mm", "8mm"], "material": ["PVC", "TPE", "natural rubber"],
     "color": COLORS[:6]}),
    ("Tablet", 480, {"screen size": ["8-inch", "10-inch", "12-inch"], "storage": ["64GB", "128GB", "256GB"],
     "color": ["black", "silver", "gold"], "connectivity": ["Wi-Fi", "Wi-Fi + Cellular"]}),
    ("Bluetooth Speaker", 95, {"color": COLORS[:6], "battery life": ["10 hours", "20 hours", "30 hours"],
     "water resistance": ["yes", "no"]}),
    ("Hiking Boots", 170, {"size": [str(s) for s in range(6, 14)], "material": ["leather", "synthetic"],
     "waterproof": ["yes", "no"]}),
    ("Electric Kettle", 45, {"capacity": ["1L", "1.5L", "2L"], "material": ["glass", "stainless steel", "plastic"],
     "color": COLORS[:5]}),
    ("Sunglasses", 120, {"frame color": COLORS[:4], "lens color": ["grey", "brown", "green", "blue"],
     "lens type": ["polarized", "non-polarized"], "frame material": ["plastic", "metal"]}),
    ("Wireless Earbuds", 130, {"color": COLORS[:4], "battery life": ["4 hours", "6 hours", "8 hours"],
     "water resistance": ["IPX4", "IPX7", "not resistant"]}),
    ("Gaming Mouse", 65, {"color": COLORS[:4], "sensor type": ["optical", "laser"], "connectivity": ["wired",
     "wireless"], "weight": ["light", "standard", "heavy"]}),
    ("Air Purifier", 210, {"room size": ["small", "medium", "large"], "filter type": ["HEPA", "carbon", "ionic"],
     "features": ["quiet mode", "night mode", "smart sensors"]}),
    ("Blender", 85, {"capacity": ["1L", "1.5L", "2L"], "motor power": ["500W", "800W", "1200W"],
     "material": ["plastic", "glass", "stainless steel"]}),
    ("Digital Camera", 650, {"resolution": ["20MP", "24MP", "30MP"], "zoom": ["3x", "5x", "10x"],
     "storage": ["SD card", "CF card"], "color": ["black", "silver"]}),
    ("Jigsaw Puzzle", 22, {"pieces": ["500", "1000", "1500", "2000"], "theme": ["animals", "art", "landscapes",
     "fantasy"], "difficulty level": ["beginner", "intermediate", "expert"]}),
    ("Bicycle", 700, {"frame size": ["small", "medium", "large"], "color": COLORS[:5], "type": ["road", "mountain",
     "city"]}),
    ("Skateboard", 90, {"deck material": ["maple", "bamboo", "plastic"], "length": ["28 inch", "31 inch",
     "34 inch"], "design": ["plain", "graphic", "custom"]}),
    ("Vacuum Cleaner", 280, {"type": ["upright", "canister", "robotic"], "bagged/bagless": ["bagged", "bagless"],
     "features": ["pet hair removal", "cordless", "HEPA filter"], "color": COLORS[:3]}),
    ("Garden Hose", 40, {"length": ["25ft", "50ft", "100ft"], "material": ["rubber", "vinyl", "latex"],
     "color": COLORS[:4]}),
    ("Notebook", 12, {"size": ["A5", "A4", "pocket"], "cover type": ["hard cover", "soft cover"],
     "paper": ["lined", "grid", "blank", "dotted"]}),
    ("Pet Bed", 55, {"size": ["small", "medium", "large"], "material": ["fleece", "memory foam", "polyester"],
     "color": COLORS[:5]}),
    ("Tent", 240, {"size": ["2-person", "4-person", "6-person"], "season": ["3-season", "4-season"],
     "color": ["green", "orange", "blue", "grey"]}),
    ("Rain Jacket", 130, {"size": ["S", "M", "L", "XL"], "color": COLORS[:5], "hood": ["fixed", "packable"]}),
    ("Wall Clock", 48, {"diameter": ["10 inches", "12 inches", "14 inches"], "color": COLORS[:4],
     "type": ["analog", "digital"]}),
    ("E-Reader", 160, {"screen size": ["6-inch", "7-inch", "8-inch"], "connectivity": ["Wi-Fi",
     "Wi-Fi + Cellular"], "storage": ["8GB", "16GB", "32GB"], "color": ["black", "white"]}),
    ("Portable Charger", 50, {"capacity": ["5000mAh", "10000mAh", "20000mAh"], "output": ["USB-A", "USB-C",
     "Wireless"], "color": COLORS[:4]}),
    ("Security Camera", 140, {"resolution": ["1080p", "2K", "4K"], "field of view": ["110 degrees", "130 degrees",
     "160 degrees"], "connectivity": ["Wi-Fi", "Ethernet"], "night vision": ["yes", "no"]}),
    ("Luggage Set", 300, {"piece count": ["2-piece", "3-piece", "4-piece"], "color": COLORS[:5],
     "material": ["softshell", "hardshell"]}),
    ("Cycling Helmet", 75, {"size": ["S", "M", "L"], "color": COLORS[:5], "ventilation": ["low", "medium", "high"]}),
    ("Dumbbell Set", 190, {"weight range": ["5-25 lbs", "30-50 lbs", "55-75 lbs"], "material": ["iron", "rubber",
     "urethane"], "set type": ["fixed", "adjustable"]}),
    ("Grill", 420, {"type": ["electric", "gas", "charcoal"], "size": ["portable", "medium", "large"],
     "features": ["side burner", "rotisserie", "none"]}),
    ("Perfume", 85, {"scent family": ["woody", "fresh", "oriental", "floral"], "size": ["30ml", "50ml", "100ml"],
     "gender": ["men", "women", "unisex"]}),
    ("Action Camera", 330, {"resolution": ["1080p", "4K", "5K"], "waterproof": ["yes", "no"],
     "color": ["black", "silver", "orange"], "battery": ["standard", "extended"]}),
    ("Makeup Kit", 60, {"skin tone": ["light", "medium", "dark"], "kit size": ["basic", "professional"],
     "brand": ["Brand A", "Brand B", "Brand C", "Brand D"]}),
    ("Fleece Jacket", 95, {"size": ["S", "M", "L", "XL", "XXL"], "color": COLORS[:5], "zipper": ["full", "half"]}),
    ("Espresso Machine", 520, {"pressure": ["9 bar", "15 bar", "19 bar"], "capacity": ["1L", "1.5L", "2L"],
     "type": ["manual", "automatic", "capsule"]}),
    ("Smartphone", 800, {"color": ["black", "white", "blue", "rose gold"], "storage": ["128GB", "256GB",
     "512GB"], "RAM": ["6GB", "8GB", "12GB"], "screen size": ["6.1-inch", "6.7-inch"]}),
    ("Cookware Set", 230, {"material": ["stainless steel", "non-stick", "cast iron"], "piece count": ["5", "8",
     "12"], "color": ["black", "silver", "red"]}),
    ("Desk", 380, {"material": ["wood", "glass", "metal"], "color": ["black", "white", "walnut", "oak"],
     "size": ["small", "medium", "large"]}),
    ("Sneakers", 90, {"size": [str(s) for s in range(6, 13)], "color": COLORS[:5], "material": ["canvas",
     "leather", "synthetic"]}),
    ("Fitness Tracker", 110, {"color": COLORS[:5], "band material": ["silicone", "fabric", "leather"],
     "battery life": ["5 days", "7 days", "14 days"]}),
    ("Bookshelf", 150, {"material": ["wood", "metal", "glass"], "color": ["black", "white", "brown", "grey"],
     "height": ["3 ft", "4 ft", "5 ft", "6 ft"]}),
]
LINES = ["", "Classic", "Pro", "Eco", "Urban", "Trail", "Lite", "Max", "Studio", "Nomad", "Prime", "Aero", "Core",
         "Flex", "Nova", "Summit", "Vista", "Terra", "Pulse", "Zen", "Atlas", "Echo", "Orbit", "Vale", "Drift"]
EXTRA_OPTIONS = [("warranty", ["1 year", "2 years", "3 years"]), ("packaging", ["standard", "gift box"]),
                 ("edition", ["standard", "limited"]), ("bundle", ["none", "with accessories"])]
"""Options every type may have, added until a type has 5 options and at least 60 variants to choose from."""
STATUSES = ["pending", "processed", "delivered", "cancelled"]
STATUS_WEIGHTS = [30, 20, 40, 10]
REASONS = ["no longer needed", "ordered by mistake"]
# fmt: on


def _options(given: dict[str, list[str]]) -> dict[str, list[str]]:
    options = dict(given)
    for name, values in EXTRA_OPTIONS:
        if len(options) >= 5 and prod(len(v) for v in options.values()) >= 60:
            break
        options[name] = values
    return options


def world_name(scale: float) -> str:
    return f"retail-{scale:g}x"


def address(rng: random.Random) -> dict[str, str]:
    """A made-up US street address."""
    city, state, zip3 = rng.choice(CITIES)
    second = rng.choice(["", "", f"Apt {rng.randint(1, 40)}", f"Suite {rng.randint(100, 999)}"])
    return {
        "address1": f"{rng.randint(1, 9999)} {rng.choice(STREETS)} {rng.choice(STREET_KINDS)}",
        "address2": second,
        "city": city,
        "country": "USA",
        "state": state,
        "zip": f"{zip3}{rng.randint(0, 99):02d}",
    }


class _Ids:
    """Unique random ids of a fixed digit count."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.seen: set[str] = set()

    def new(self, prefix: str, digits: int) -> str:
        while True:
            text = f"{prefix}{self.rng.randrange(10 ** (digits - 1), 10**digits)}"
            if text not in self.seen:
                self.seen.add(text)
                return text


def generate_state(scale: float, seed: int = 0) -> dict[str, Any]:
    """The retail state at `scale` times tau2's size: {"users": {...}, "orders": {...}, "products": {...}}."""
    rng = random.Random(f"retail-scale:{seed}:{scale:g}")
    ids = _Ids(rng)
    n_users, n_orders, n_products = (max(2, round(k * scale)) for k in (500, 1000, 50))
    products = _catalogue(rng, ids, n_products)
    users = _users(rng, ids, n_users)
    orders = _orders(rng, ids, n_orders, list(users.values()), list(products.values()))
    return {"users": users, "orders": orders, "products": products}


def _catalogue(rng: random.Random, ids: _Ids, n: int) -> dict[str, Any]:
    """`n` products, each a type of `TYPES` (in a product line past the first 50) with 30-60 variants."""
    products: dict[str, Any] = {}
    for k in range(n):
        kind, base, given = TYPES[k % len(TYPES)]
        options = _options(given)
        line = LINES[(k // len(TYPES)) % len(LINES)]
        name = f"{line} {kind}".strip() if k < len(TYPES) * len(LINES) else f"{kind} #{k // len(TYPES)}"
        combos = list(cartesian(*options.values()))
        product_id = ids.new("", 10)
        variants: dict[str, Any] = {}
        for combo in rng.sample(combos, min(len(combos), rng.randint(30, 60))):
            item_id = ids.new("", 10)
            variants[item_id] = {
                "item_id": item_id,
                "options": dict(zip(options, combo, strict=True)),
                "available": rng.random() < 0.8,
                "price": round(base * rng.uniform(0.8, 1.35), 2),
            }
        products[product_id] = {"name": name, "product_id": product_id, "variants": variants}
    return products


def _users(rng: random.Random, ids: _Ids, n: int) -> dict[str, Any]:
    """`n` users with an address, one to three payment methods and (so far) no orders."""
    users: dict[str, Any] = {}
    for _ in range(n):
        first, last = rng.choice(FIRST), rng.choice(LAST)
        while (user_id := f"{first.lower()}_{last.lower()}_{rng.randint(1000, 9999)}") in users:
            pass
        methods: dict[str, Any] = {}
        for source in rng.sample(["credit_card", "paypal", "gift_card"], rng.choice([1, 2, 2, 3, 3])):
            method_id = ids.new(f"{source}_", 7)
            if source == "credit_card":
                methods[method_id] = {
                    "source": source,
                    "brand": rng.choice(["visa", "mastercard", "amex", "discover"]),
                    "last_four": f"{rng.randint(0, 9999):04d}",
                    "id": method_id,
                }
            elif source == "gift_card":
                methods[method_id] = {"source": source, "balance": float(rng.randint(0, 300)), "id": method_id}
            else:
                methods[method_id] = {"source": source, "id": method_id}
        users[user_id] = {
            "user_id": user_id,
            "name": {"first_name": first, "last_name": last},
            "address": address(rng),
            "email": f"{first.lower()}.{last.lower()}{user_id[-4:]}@example.com",
            "payment_methods": methods,
            "orders": [],
        }
    return users


def _orders(
    rng: random.Random, ids: _Ids, n: int, users: list[dict[str, Any]], products: list[dict[str, Any]]
) -> dict[str, Any]:
    """`n` orders of variants of `products`, each added to its user's `orders` (every user gets one first)."""
    variants = [list(p["variants"].values()) for p in products]
    orders: dict[str, Any] = {}
    for k in range(n):
        user = users[k] if k < len(users) else rng.choice(users)
        order_id = ids.new("#W", 7)
        items = []
        for _ in range(rng.choice([1, 2, 3, 4, 4, 5, 5, 6, 7, 8])):
            at = rng.randrange(len(products))
            variant = rng.choice(variants[at])
            items.append(
                {
                    "name": products[at]["name"],
                    "product_id": products[at]["product_id"],
                    "item_id": variant["item_id"],
                    "price": variant["price"],
                    "options": dict(variant["options"]),
                }
            )
        status = rng.choices(STATUSES, STATUS_WEIGHTS)[0]
        fulfillments = []
        if status in ("processed", "delivered"):  # shipped in one parcel, or in two
            cut = rng.randint(1, len(items) - 1) if len(items) > 1 and rng.random() < 0.3 else len(items)
            for parcel in (items[:cut], items[cut:]):
                if parcel:
                    tracking = [str(rng.randrange(10**11, 10**12))]
                    fulfillments.append({"tracking_id": tracking, "item_ids": [i["item_id"] for i in parcel]})
        total = round(sum(i["price"] for i in items), 2)
        method = rng.choice(list(user["payment_methods"]))
        history = [{"transaction_type": "payment", "amount": total, "payment_method_id": method}]
        cards = [m for m in user["payment_methods"] if m.startswith("gift_card_") and m != method]
        if cards and rng.random() < 0.5:  # part paid with a gift card
            share = round(min(total / 2, rng.uniform(5, 100)), 2)
            history = [
                {"transaction_type": "payment", "amount": share, "payment_method_id": cards[0]},
                {"transaction_type": "payment", "amount": round(total - share, 2), "payment_method_id": method},
            ]
        if status == "cancelled":
            history += [{**payment, "transaction_type": "refund"} for payment in history]
        orders[order_id] = {
            "order_id": order_id,
            "user_id": user["user_id"],
            "address": dict(user["address"]) if rng.random() < 0.9 else address(rng),
            "items": items,
            "fulfillments": fulfillments,
            "status": status,
            "payment_history": history,
        }
        user["orders"].append(order_id)
    return orders


_ADDRESS_FIELDS = ["address1", "address2", "city", "state", "country", "zip"]
WORLD_YAML = """\
description: A store's users, orders and product catalogue, for benchmarking real-size states.
version: "1"
simulator:
  instructions: >-
    Amounts are in US dollars with two decimals. Cancelling sets status 'cancelled' and appends a refund to
    payment_history; a return sets status 'return requested' and records return_items.
state_schema:
  type: object
  required: [users, orders, products]
  properties:
    users:
      type: object
      additionalProperties:
        type: object
        required: [user_id, name, address, email, payment_methods, orders]
        properties:
          user_id: {type: string}
          name:
            type: object
            required: [first_name, last_name]
            properties: {first_name: {type: string}, last_name: {type: string}}
          address: &address
            type: object
            required: [address1, address2, city, state, country, zip]
            properties:
              address1: {type: string}
              address2: {type: string}
              city: {type: string}
              state: {type: string}
              country: {type: string}
              zip: {type: string}
          email: {type: string}
          payment_methods:
            type: object
            additionalProperties:
              type: object
              required: [source, id]
              properties:
                source: {enum: [credit_card, paypal, gift_card]}
                brand: {type: string}
                last_four: {type: string}
                balance: {type: number}
                id: {type: string}
          orders: {type: array, items: {type: string}}
    orders:
      type: object
      additionalProperties:
        type: object
        required: [order_id, user_id, address, items, fulfillments, status, payment_history]
        properties:
          order_id: {type: string}
          user_id: {type: string}
          address: *address
          items:
            type: array
            items:
              type: object
              required: [name, product_id, item_id, price, options]
              properties:
                name: {type: string}
                product_id: {type: string}
                item_id: {type: string}
                price: {type: number}
                options: {type: object, additionalProperties: {type: string}}
          fulfillments:
            type: array
            items:
              type: object
              required: [tracking_id, item_ids]
              properties:
                tracking_id: {type: array, items: {type: string}}
                item_ids: {type: array, items: {type: string}}
          status: {enum: [pending, processed, delivered, cancelled, return requested, exchange requested]}
          payment_history:
            type: array
            items:
              type: object
              required: [transaction_type, amount, payment_method_id]
              properties:
                transaction_type: {enum: [payment, refund]}
                amount: {type: number}
                payment_method_id: {type: string}
          return_items: {type: array, items: {type: string}}
    products:
      type: object
      additionalProperties:
        type: object
        required: [name, product_id, variants]
        properties:
          name: {type: string}
          product_id: {type: string}
          variants:
            type: object
            additionalProperties:
              type: object
              required: [item_id, options, available, price]
              properties:
                item_id: {type: string}
                options: {type: object}
                available: {type: boolean}
                price: {type: number}
tools:
  - name: find_user_id_by_email
    description: Find the user id of the account with this email address.
    inputSchema:
      type: object
      required: [email]
      properties: {email: {type: string, description: "The user's email, e.g. mia.lee1021@example.com."}}
      additionalProperties: false
    outputSchema: {type: object}
    errors: [{code: user_not_found, when: no account has this email}]
    annotations: {readOnlyHint: true}
  - name: find_user_id_by_name_zip
    description: Find the user id from a first name, a last name and a zip code.
    inputSchema:
      type: object
      required: [first_name, last_name, zip]
      properties: {first_name: {type: string}, last_name: {type: string}, zip: {type: string}}
      additionalProperties: false
    outputSchema: {type: object}
    errors: [{code: user_not_found, when: no account matches}]
    annotations: {readOnlyHint: true}
  - name: get_user_details
    description: Get a user's name, address, email, payment methods and order ids.
    inputSchema:
      type: object
      required: [user_id]
      properties: {user_id: {type: string, description: e.g. mia_lee_1021}}
      additionalProperties: false
    outputSchema: {type: object}
    errors: [{code: user_not_found, when: no user has this id}]
    annotations: {readOnlyHint: true}
  - name: get_order_details
    description: Get an order's status, items, address, fulfillments and payments.
    inputSchema:
      type: object
      required: [order_id]
      properties: &order_id {order_id: {type: string, description: "The order id, starting with '#W', e.g. #W2741096."}}
      additionalProperties: false
    outputSchema: {type: object}
    errors: [&no_order {code: order_not_found, when: no order has this id}]
    annotations: {readOnlyHint: true}
  - name: get_product_details
    description: Get a product's variants with their options, price and availability.
    inputSchema:
      type: object
      required: [product_id]
      properties: {product_id: {type: string, description: A 10-digit product id.}}
      additionalProperties: false
    outputSchema: {type: object}
    errors: [{code: product_not_found, when: no product has this id}]
    annotations: {readOnlyHint: true}
  - name: list_all_product_types
    description: List every product's name and product id.
    inputSchema: {type: object, required: [], properties: {}, additionalProperties: false}
    outputSchema: {type: object}
    errors: []
    annotations: {readOnlyHint: true}
  - name: cancel_pending_order
    description: >-
      Cancel a pending order; the whole amount is refunded to the payment method it was paid with. Needs the
      user's explicit confirmation.
    inputSchema:
      type: object
      required: [order_id, reason]
      properties:
        <<: *order_id
        reason: {type: string, enum: [no longer needed, ordered by mistake]}
      additionalProperties: false
    outputSchema: {type: object}
    errors: [*no_order, &not_pending {code: order_not_pending, when: "the order's status is not pending"}]
  - name: modify_pending_order_address
    description: Change the shipping address of a pending order.
    inputSchema:
      type: object
      required: [order_id, address1, address2, city, state, country, zip]
      properties:
        <<: *order_id
        address1: {type: string}
        address2: {type: string}
        city: {type: string}
        state: {type: string}
        country: {type: string}
        zip: {type: string}
      additionalProperties: false
    outputSchema: {type: object}
    errors: [*no_order, *not_pending]
  - name: modify_pending_order_items
    description: >-
      Exchange items of a pending order for other available variants of the same products (item_ids and
      new_item_ids pair by position); the price difference is settled with payment_method_id. Can be done once
      per order.
    inputSchema:
      type: object
      required: [order_id, item_ids, new_item_ids, payment_method_id]
      properties:
        <<: *order_id
        item_ids: &ids {type: array, items: {type: string}, minItems: 1}
        new_item_ids: *ids
        payment_method_id: {type: string}
      additionalProperties: false
    outputSchema: {type: object}
    errors:
      - *no_order
      - *not_pending
      - {code: item_not_in_order, when: an item id is not in the order}
      - {code: variant_unavailable, when: a new item is not an available variant of the same product}
      - {code: insufficient_gift_card_balance, when: the gift card cannot pay the difference}
  - name: return_delivered_order_items
    description: >-
      Request a return of items of a delivered order; the refund goes to payment_method_id (the original method
      or a gift card of the user).
    inputSchema:
      type: object
      required: [order_id, item_ids, payment_method_id]
      properties:
        <<: *order_id
        item_ids: *ids
        payment_method_id: {type: string}
      additionalProperties: false
    outputSchema: {type: object}
    errors:
      - *no_order
      - {code: order_not_delivered, when: "the order's status is not delivered"}
      - {code: item_not_in_order, when: an item id is not in the order}
  - name: modify_user_address
    description: Change a user's default address.
    inputSchema:
      type: object
      required: [user_id, address1, address2, city, state, country, zip]
      properties:
        user_id: {type: string}
        address1: {type: string}
        address2: {type: string}
        city: {type: string}
        state: {type: string}
        country: {type: string}
        zip: {type: string}
      additionalProperties: false
    outputSchema: {type: object}
    errors: [{code: user_not_found, when: no user has this id}]
"""
"""world.yaml after its name and title: tau2's retail tools, with loose output schemas, and the state's schema."""


POLICY = """\
# Retail agent policy

- Authenticate the user first, by email or by name and zip code, even when they give their user id.
- Act only on the authenticated user's orders. Only pending orders can be cancelled or modified; only
  delivered orders can be returned. Items are exchanged only for available variants of the same product.
- Before a write action, list what will change and get an explicit "yes" from the user.
- Refunds go to the original payment method or to a gift card of the user.
"""


def world_files(scale: float, state: dict[str, Any]) -> dict[str, str]:
    """world.yaml, policy.md and state.json of the world at `scale` (state.json as compact JSON)."""
    head = f"name: {world_name(scale)}\ntitle: Online retail at {scale:g}x the tau2-bench retail database\n"
    return {
        "world.yaml": head + WORLD_YAML,
        "policy.md": POLICY,
        "state.json": json.dumps(state, separators=(",", ":")),
    }


def world_dir(scale: float, seed: int = 0, cache: Path = CACHE) -> Path:
    """The folder of the world at (`scale`, `seed`), generated on first use: pass it to `--worlds-dir` (it holds
    that one world, named `world_name(scale)`)."""
    parent = cache / f"v{GENERATOR_VERSION}-seed{seed}-{scale:g}x"
    if (parent / world_name(scale) / "state.json").is_file():
        return parent
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".tmp-", dir=cache))
    try:
        folder = work / world_name(scale)
        folder.mkdir()
        for name, text in world_files(scale, generate_state(scale, seed)).items():
            (folder / name).write_text(text, encoding="utf-8")
        try:
            os.replace(work, parent)  # appears whole, or not at all
        except OSError:  # another process made it first
            if not (parent / world_name(scale) / "state.json").is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return parent


def load_state(worlds_dir: Path, name: str) -> dict[str, Any]:
    state: dict[str, Any] = json.loads((worlds_dir / name / "state.json").read_text(encoding="utf-8"))
    return state


ALIASES = {"find_user_by_email": "find_user_id_by_email", "list_products": "list_all_product_types"}
"""The shipped tiny `retail` world's names for tools of the generated worlds."""


class RetailIndex:
    """Lookups a simulator of the retail worlds needs: who has this email, payment method, name and zip; which
    product holds this item; orders by status."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state
        self.user_by_email: dict[str, str] = {}
        self.user_of_method: dict[str, str] = {}
        self.users_by_name_zip: dict[tuple[str, str, str], list[str]] = defaultdict(list)
        for uid, user in state["users"].items():
            self.user_by_email[user["email"]] = uid
            self.user_of_method.update(dict.fromkeys(user.get("payment_methods", {}), uid))
            name = user.get("name", {})
            key = (name.get("first_name", ""), name.get("last_name", ""), user.get("address", {}).get("zip", ""))
            self.users_by_name_zip[key].append(uid)
        self.product_of_item = {
            item_id: pid for pid, product in state["products"].items() for item_id in product.get("variants", {})
        }
        self.orders_by_status: dict[str, list[str]] = defaultdict(list)
        for oid, order in state["orders"].items():
            self.orders_by_status[order["status"]].append(oid)

    def named(self, kind: str, args: dict[str, Any]) -> list[tuple[str, str]]:
        """The (collection, key) of every record the call names, as the bench knows them."""
        refs: list[tuple[str, str]] = []
        if kind == "find_user_id_by_email":
            refs.append(("users", self.user_by_email.get(args.get("email", ""), "")))
        elif kind == "find_user_id_by_name_zip":
            key = (args.get("first_name", ""), args.get("last_name", ""), args.get("zip", ""))
            refs += [("users", uid) for uid in self.users_by_name_zip.get(key, [])]
        if "user_id" in args:
            refs.append(("users", args["user_id"]))
        if "order_id" in args:
            refs.append(("orders", args["order_id"]))
        if "product_id" in args:
            refs.append(("products", args["product_id"]))
        for item_id in [*args.get("item_ids", []), *args.get("new_item_ids", [])]:
            refs.append(("products", self.product_of_item.get(item_id, "")))
        if "payment_method_id" in args:
            refs.append(("users", self.user_of_method.get(args["payment_method_id"], "")))
        known = [(c, k) for c, k in refs if k in self.state.get(c, {})]
        return list(dict.fromkeys(known))


def covers(reference: Any, shown: Any) -> bool:
    """Whether `shown` holds every key of `reference` at every level (values may differ; lists may grow)."""
    if isinstance(reference, dict):
        return isinstance(shown, dict) and all(k in shown and covers(v, shown[k]) for k, v in reference.items())
    if isinstance(reference, list):
        return (
            isinstance(shown, list)
            and len(shown) >= len(reference)
            and all(covers(r, s) for r, s in zip(reference, shown, strict=False))
        )
    return True


def _prompt_parts(body: dict[str, Any]) -> tuple[str, dict[str, Any], str]:
    """(tool, arguments, state text) of a simulator request (an OpenAI chat-completions body)."""
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        if isinstance(content, str) and "Current state" in content and "\nCall: " in content:
            start = content.index("\n", content.index("Current state")) + 1
            end = content.index("\nCall: ", start)
            tool = content[end + 7 :].split("\n", 1)[0].strip()
            arguments = json.loads(content.split("\nArguments: ", 1)[1].split("\n", 1)[0])
            return tool, arguments, content[start:end].strip()
    raise ValueError("no simulator prompt (Current state ... Call: ...) in the request")


@dataclass
class SimStats:
    """What the fake simulator saw: requests, the named records and how many were whole, patches."""

    requests: int = 0
    unparsed: int = 0
    named_calls: int = 0
    whole_calls: int = 0
    missing_by_tool: Counter[str] = field(default_factory=Counter)
    write_calls: int = 0
    patch_bytes: int = 0
    state_chars: list[int] = field(default_factory=list)
    first_problem: str = ""
    first_miss: str = ""


class RetailSimulator:
    """A flawless simulator of the retail worlds, answering OpenAI request bodies (`serve_lean`'s answer).

    Reads the call and the state view from the prompt; answers reads with the named record (from the prompt
    when it is there whole, else from the generated state, so the workload is the same either way) and writes
    with an RFC 6902 patch of the record they name. `stats` counts whether the named records came whole.
    """

    def __init__(self, state: dict[str, Any]) -> None:
        self.index = RetailIndex(state)
        self.reference = state
        self.stats = SimStats()

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        self.stats.requests += 1
        try:
            tool, args, text = _prompt_parts(body)
            view = json.loads(text)
        except (ValueError, KeyError, IndexError) as exc:
            self.stats.unparsed += 1
            self.stats.first_problem = self.stats.first_problem or f"unparsed prompt: {exc}"
            return _ok({}, [])
        self.stats.state_chars.append(len(text))
        kind = ALIASES.get(tool, tool)
        refs = self.index.named(kind, args)
        whole = {ref for ref in refs if covers(self.reference[ref[0]][ref[1]], _lookup(view, ref))}
        if refs:
            self.stats.named_calls += 1
            if len(whole) == len(refs):
                self.stats.whole_calls += 1
            else:
                self.stats.missing_by_tool[tool] += 1
                if not self.stats.first_miss:
                    ref = next(r for r in refs if r not in whole)
                    shown = _lookup(view, ref)
                    seen = "absent" if shown is None else f"cut to {json.dumps(shown)[:200]}"
                    self.stats.first_miss = f"{tool} {json.dumps(args)[:200]}: {ref[0]}/{ref[1]} {seen}"

        def record(ref: tuple[str, str]) -> Any:
            return _lookup(view, ref) if ref in whole else self.reference[ref[0]][ref[1]]

        output, patch = self._simulate(kind, args, record)
        if patch:
            self.stats.write_calls += 1
            self.stats.patch_bytes += len(json.dumps(patch, separators=(",", ":")))
        return _ok(output, patch)

    def _simulate(self, kind: str, args: dict[str, Any], record: Any) -> tuple[dict[str, Any], list[Any]]:
        index = self.index
        order_id = args.get("order_id", "")
        path = "/orders/" + order_id.replace("~", "~0").replace("/", "~1")
        if kind == "find_user_id_by_email":
            return {"user_id": index.user_by_email.get(args.get("email", ""), "")}, []
        if kind == "find_user_id_by_name_zip":
            key = (args.get("first_name", ""), args.get("last_name", ""), args.get("zip", ""))
            return {"user_id": (index.users_by_name_zip.get(key) or [""])[0]}, []
        if kind in ("get_user_details", "get_order_details", "get_product_details"):
            collection, key = {
                "get_user_details": ("users", "user_id"),
                "get_order_details": ("orders", "order_id"),
                "get_product_details": ("products", "product_id"),
            }[kind]
            if args.get(key) not in self.reference[collection]:
                return {}, []
            return dict(record((collection, args[key]))), []
        if kind == "list_all_product_types":
            products = self.reference["products"].items()
            return {"products": [{"product_id": k, "name": p["name"]} for k, p in products]}, []
        if kind == "modify_user_address" and args.get("user_id") in self.reference["users"]:
            new = {k: args.get(k, "") for k in _ADDRESS_FIELDS}
            return {"user_id": args["user_id"], "address": new}, [
                {"op": "replace", "path": f"/users/{args['user_id']}/address", "value": new}
            ]
        if order_id not in self.reference["orders"]:
            return {}, []
        order = record(("orders", order_id))
        paid_with = order["payment_history"][0]["payment_method_id"] if order.get("payment_history") else ""
        prices = {item["item_id"]: item["price"] for item in order.get("items", [])}
        if kind == "cancel_pending_order":
            total = round(sum(prices.values()), 2)
            refund = {"transaction_type": "refund", "amount": total, "payment_method_id": paid_with}
            return {"order_id": order_id, "status": "cancelled", "refund_amount": total}, [
                {"op": "replace", "path": f"{path}/status", "value": "cancelled"},
                {"op": "add", "path": f"{path}/payment_history/-", "value": refund},
            ]
        if kind == "modify_pending_order_address":
            new = {k: args.get(k, "") for k in _ADDRESS_FIELDS}
            return {"order_id": order_id, "address": new}, [{"op": "replace", "path": f"{path}/address", "value": new}]
        if kind == "return_delivered_order_items":
            refund = round(sum(prices.get(i, 0.0) for i in args.get("item_ids", [])), 2)
            return {"order_id": order_id, "status": "return requested", "refund_amount": refund}, [
                {"op": "replace", "path": f"{path}/status", "value": "return requested"},
                {"op": "add", "path": f"{path}/return_items", "value": list(args.get("item_ids", []))},
            ]
        if kind == "modify_pending_order_items":
            items = order.get("items", [])
            patch: list[dict[str, Any]] = []
            new_items = []
            difference = 0.0
            for old_id, new_id in zip(args.get("item_ids", []), args.get("new_item_ids", []), strict=False):
                product = self.reference["products"].get(index.product_of_item.get(new_id, ""))
                at = next((i for i, item in enumerate(items) if item["item_id"] == old_id), None)
                if product is None or at is None:  # exchanged earlier in the episode: nothing to change
                    continue
                variant = product["variants"][new_id]
                new = {
                    "name": product["name"],
                    "product_id": product["product_id"],
                    "item_id": new_id,
                    "price": variant["price"],
                    "options": dict(variant["options"]),
                }
                difference += variant["price"] - prices.get(old_id, variant["price"])
                patch.append({"op": "replace", "path": f"{path}/items/{at}", "value": new})
                new_items.append(new)
            difference = round(difference, 2)
            if difference:
                entry = {
                    "transaction_type": "payment" if difference > 0 else "refund",
                    "amount": abs(difference),
                    "payment_method_id": args.get("payment_method_id", paid_with),
                }
                patch.append({"op": "add", "path": f"{path}/payment_history/-", "value": entry})
            return {"order_id": order_id, "items": new_items, "price_difference": difference}, patch
        return {}, []


def _lookup(view: Any, ref: tuple[str, str]) -> Any:
    collection = view.get(ref[0]) if isinstance(view, dict) else None
    return collection.get(ref[1]) if isinstance(collection, dict) else None


def _ok(output: dict[str, Any], patch: list[Any]) -> dict[str, Any]:
    return {"is_error": False, "error_code": None, "message": "", "output": output, "state_patch": patch}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="write (or find in the cache) a world; print its --worlds-dir")
    gen.add_argument("--scale", type=float, default=1.0)
    gen.add_argument("--seed", type=int, default=0)
    fake = sub.add_parser("fake", help="serve a lean fake provider answering a retail world's tools")
    fake.add_argument("--port", type=int, required=True)
    fake.add_argument("--world", type=Path, required=True, help="a world folder (holding state.json)")
    fake.add_argument("--latency", type=float, default=0.0)
    args = parser.parse_args()
    if args.command == "generate":
        start = time.perf_counter()
        folder = world_dir(args.scale, args.seed)
        state_file = folder / world_name(args.scale) / "state.json"
        state = json.loads(state_file.read_text())
        counts = ", ".join(f"{len(v)} {k}" for k, v in state.items())
        print(f"{folder}  ({state_file.stat().st_size / 1e6:.2f} MB: {counts}; {time.perf_counter() - start:.1f} s)")
        return
    from simia.testing.fake_provider import serve_lean

    simulator = RetailSimulator(json.loads((args.world / "state.json").read_text()))
    asyncio.run(serve_lean(args.port, simulator.answer, args.latency))


if __name__ == "__main__":
    main()
