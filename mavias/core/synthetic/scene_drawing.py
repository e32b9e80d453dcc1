"""Procedural drawing of synthetic scenes: a background, a small co-occurring object and a main object.

Everything is drawn on a virtual 64 x 64 canvas (scaled to the output size, supersampled for anti-aliasing).
Objects and co-objects are composites of primitives in a unit box [-1, 1]^2 (x right, y down, objects face
right); a :class:`Placement` maps the unit box to the canvas with a scale, a rotation and a mirror.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

VIRTUAL_SIZE = 64
SUPERSAMPLE = 3
COOBJECT_HALF = 7.0
PIXEL_NOISE_STD = 4.0

Point = tuple[float, float]
RGB = tuple[int, int, int]

OUTLINE: RGB = (25, 25, 25)
BLACK: RGB = (20, 20, 20)
GLASS: RGB = (170, 210, 240)
CREAM: RGB = (245, 240, 225)
WHITE: RGB = (245, 245, 245)


@dataclass(frozen=True)
class Placement:
    """Unit-box -> virtual-canvas transform."""

    cx: float = 0.0
    cy: float = 0.0
    half: float = 1.0
    angle: float = 0.0
    mirror: bool = False

    def apply(self, points: Sequence[Point]) -> list[Point]:
        cos, sin = math.cos(self.angle), math.sin(self.angle)
        sign = -1.0 if self.mirror else 1.0
        return [
            (self.cx + self.half * (sign * x * cos - y * sin), self.cy + self.half * (sign * x * sin + y * cos))
            for x, y in points
        ]


class Pen:
    """Draws primitives given in placement coordinates onto a supersampled PIL canvas."""

    def __init__(self, draw: ImageDraw.ImageDraw, pixels_per_unit: float, placement: Placement = Placement()):
        self.draw = draw
        self.pixels_per_unit = pixels_per_unit
        self.placement = placement

    def at(self, placement: Placement) -> Pen:
        return Pen(self.draw, self.pixels_per_unit, placement)

    def _canvas(self, points: Sequence[Point]) -> list[Point]:
        return [(x * self.pixels_per_unit, y * self.pixels_per_unit) for x, y in self.placement.apply(points)]

    def polygon(self, points: Sequence[Point], fill: RGB, outline: bool = False) -> None:
        width = max(1, round(0.7 * self.pixels_per_unit)) if outline else 0
        self.draw.polygon(self._canvas(points), fill=fill, outline=OUTLINE if outline else None, width=width)

    def rect(self, x0: float, y0: float, x1: float, y1: float, fill: RGB, outline: bool = False) -> None:
        self.polygon([(x0, y0), (x1, y0), (x1, y1), (x0, y1)], fill, outline)

    def ellipse(self, cx: float, cy: float, rx: float, ry: float, fill: RGB, outline: bool = False) -> None:
        self.polygon(_arc_points(cx, cy, rx, ry, 0.0, 2 * math.pi, 24), fill, outline)

    def line(self, points: Sequence[Point], fill: RGB, width: float) -> None:
        pixel_width = max(1, round(width * self.placement.half * self.pixels_per_unit))
        self.draw.line(self._canvas(points), fill=fill, width=pixel_width, joint="curve")


def _arc_points(cx: float, cy: float, rx: float, ry: float, start: float, stop: float, n: int) -> list[Point]:
    step = (stop - start) / n
    return [(cx + rx * math.cos(start + i * step), cy + ry * math.sin(start + i * step)) for i in range(n)]


def _shade(color: RGB, factor: float) -> RGB:
    return tuple(int(min(255, c * factor)) for c in color)  # type: ignore[return-value]


# --- main objects: the shape identifies the class; `color` is the (class-independent) body colour -------------


def draw_car(pen: Pen, color: RGB) -> None:
    pen.polygon([(-0.6, 0.02), (-0.45, -0.45), (0.3, -0.45), (0.62, 0.02)], color, outline=True)
    pen.polygon([(0.32, -0.38), (0.53, -0.03), (0.05, -0.03), (0.05, -0.38)], GLASS)  # windshield
    pen.polygon([(-0.4, -0.38), (-0.02, -0.38), (-0.02, -0.03), (-0.52, -0.03)], GLASS)
    pen.polygon([(-1, 0.12), (-0.95, 0.0), (0.95, 0.0), (1, 0.12), (1, 0.45), (-1, 0.45)], color, outline=True)
    pen.line([(0.0, 0.04), (0.0, 0.4)], OUTLINE, 0.05)  # door
    pen.ellipse(0.9, 0.15, 0.08, 0.08, (250, 230, 90))  # headlight
    for x in (-0.55, 0.55):  # wheels
        pen.ellipse(x, 0.45, 0.26, 0.26, BLACK)
        pen.ellipse(x, 0.45, 0.1, 0.1, (160, 160, 160))


def draw_bird(pen: Pen, color: RGB) -> None:
    for x in (-0.1, 0.12):  # legs
        pen.line([(x, 0.45), (x - 0.05, 0.85)], (210, 120, 20), 0.06)
    pen.polygon([(-0.5, 0.1), (-1, -0.2), (-1, 0.35)], _shade(color, 0.7), outline=True)  # tail
    pen.ellipse(-0.05, 0.15, 0.6, 0.38, color, outline=True)
    pen.ellipse(0.5, -0.3, 0.27, 0.27, color, outline=True)
    pen.polygon([(0.72, -0.4), (1.0, -0.28), (0.72, -0.18)], (245, 150, 20), outline=True)  # beak
    pen.ellipse(0.58, -0.36, 0.06, 0.06, BLACK)  # eye
    pen.polygon([(-0.45, 0.05), (0.25, -0.02), (0.05, 0.3), (-0.55, 0.32)], _shade(color, 0.7), outline=True)  # wing


def draw_boat(pen: Pen, color: RGB) -> None:
    pen.line([(-0.05, 0.35), (-0.05, -0.95)], (110, 70, 30), 0.08)  # mast
    pen.polygon([(0.02, -0.9), (0.02, 0.25), (0.8, 0.25)], CREAM, outline=True)  # sail
    pen.polygon([(-0.12, -0.7), (-0.12, 0.25), (-0.7, 0.25)], CREAM, outline=True)  # jib
    pen.polygon([(-1, 0.3), (1, 0.3), (0.7, 0.75), (-0.7, 0.75)], color, outline=True)  # hull


def draw_airplane(pen: Pen, color: RGB) -> None:
    pen.polygon([(-0.95, 0.0), (-0.7, 0.0), (-0.9, -0.55), (-1.0, -0.55)], _shade(color, 0.75), outline=True)
    pen.ellipse(0.0, 0.0, 1.0, 0.2, color, outline=True)  # fuselage
    pen.polygon([(0.15, 0.05), (-0.3, 0.05), (-0.55, 0.65), (-0.35, 0.65)], _shade(color, 0.75), outline=True)
    pen.polygon([(0.55, -0.16), (0.8, -0.1), (0.72, -0.02), (0.5, -0.02)], GLASS)  # cockpit
    pen.line([(1.02, -0.4), (1.02, 0.4)], (70, 70, 70), 0.07)  # propeller
    pen.ellipse(1.0, 0.0, 0.06, 0.06, BLACK)


def draw_fish(pen: Pen, color: RGB) -> None:
    pen.polygon([(-0.55, 0.0), (-1, -0.45), (-1, 0.45)], _shade(color, 0.7), outline=True)  # tail
    pen.polygon([(-0.3, -0.3), (0.2, -0.35), (-0.15, -0.72)], _shade(color, 0.7), outline=True)  # fin
    pen.ellipse(0.0, 0.0, 0.65, 0.42, color, outline=True)
    pen.line([(0.3, -0.26), (0.38, 0.0), (0.3, 0.26)], OUTLINE, 0.05)  # gill
    for x, y in ((-0.25, -0.12), (-0.25, 0.14), (0.0, 0.0), (0.05, 0.24), (0.02, -0.22)):  # scales
        pen.line([(x, y - 0.08), (x + 0.07, y), (x, y + 0.08)], _shade(color, 0.6), 0.04)
    pen.ellipse(0.47, -0.1, 0.07, 0.07, BLACK)


def draw_house(pen: Pen, color: RGB) -> None:
    pen.rect(0.35, -0.8, 0.58, -0.3, (120, 70, 50), outline=True)  # chimney
    pen.rect(-0.7, -0.1, 0.7, 0.8, color, outline=True)
    pen.polygon([(-0.9, -0.05), (0.0, -0.8), (0.9, -0.05)], (150, 55, 40), outline=True)  # roof
    pen.rect(-0.15, 0.35, 0.15, 0.8, (110, 70, 35), outline=True)  # door
    for x in (-0.55, 0.3):  # windows
        pen.rect(x, 0.08, x + 0.25, 0.33, GLASS, outline=True)


# --- co-occurring objects (small, upright) ------------------------------------------------------------------


def draw_traffic_light(pen: Pen) -> None:
    pen.line([(0.0, 0.2), (0.0, 1.0)], (90, 90, 90), 0.12)
    pen.rect(-0.38, -1.0, 0.38, 0.28, (40, 40, 40), outline=True)
    for y, lamp in ((-0.72, (230, 40, 30)), (-0.37, (240, 200, 30)), (-0.02, (40, 200, 70))):
        pen.ellipse(0.0, y, 0.2, 0.2, lamp)


def draw_mushroom(pen: Pen) -> None:
    pen.rect(-0.2, 0.0, 0.2, 0.9, CREAM, outline=True)
    pen.polygon(_arc_points(0.0, 0.1, 0.85, 0.75, math.pi, 2 * math.pi + 1e-9, 16), (215, 35, 35), outline=True)
    for x, y in ((-0.45, -0.15), (0.0, -0.4), (0.4, -0.12)):
        pen.ellipse(x, y, 0.13, 0.1, WHITE)


def draw_lighthouse(pen: Pen) -> None:
    def width_at(y: float) -> float:  # tower tapers from 0.42 at the bottom to 0.25 at the lantern
        return 0.25 + (y + 0.5) / 1.45 * 0.17

    bands = np.linspace(-0.5, 0.95, 5)
    for i, (top, bottom) in enumerate(zip(bands[:-1], bands[1:])):
        fill = (210, 40, 40) if i % 2 else WHITE
        top_w, bottom_w = width_at(top), width_at(bottom)
        pen.polygon([(-top_w, top), (top_w, top), (bottom_w, bottom), (-bottom_w, bottom)], fill)
    pen.rect(-0.22, -0.75, 0.22, -0.5, (250, 220, 80), outline=True)
    pen.polygon([(-0.32, -0.75), (0.32, -0.75), (0.0, -1.0)], (180, 30, 30), outline=True)


def draw_cactus(pen: Pen) -> None:
    green = (40, 140, 60)
    pen.rect(-0.62, -0.5, -0.42, 0.15, green, outline=True)
    pen.rect(-0.62, 0.0, -0.15, 0.15, green)
    pen.rect(0.42, -0.3, 0.62, 0.35, green, outline=True)
    pen.rect(0.15, 0.2, 0.62, 0.35, green)
    pen.rect(-0.2, -0.9, 0.2, 0.95, green, outline=True)


def draw_lamp(pen: Pen) -> None:
    pen.line([(0.0, -0.4), (0.0, 0.9)], (70, 70, 70), 0.1)
    pen.ellipse(0.0, 0.92, 0.4, 0.08, (60, 60, 60))
    pen.polygon([(-0.25, -0.95), (0.25, -0.95), (0.55, -0.35), (-0.55, -0.35)], (250, 215, 110), outline=True)


def draw_snowman(pen: Pen) -> None:
    for cy, r in ((0.55, 0.42), (0.0, 0.3), (-0.48, 0.22)):
        pen.ellipse(0.0, cy, r, r, WHITE, outline=True)
    pen.rect(-0.18, -1.0, 0.18, -0.68, BLACK)  # hat
    pen.rect(-0.28, -0.7, 0.28, -0.64, BLACK)
    pen.polygon([(0.05, -0.5), (0.35, -0.45), (0.05, -0.4)], (245, 140, 20))  # nose


# --- backgrounds: large areas of distinctive colour and texture (the easy shortcut) -------------------------


def _jitter(color: RGB, rng: np.random.Generator, amount: float = 12.0) -> RGB:
    offsets = rng.uniform(-amount, amount, 3)
    return tuple(int(min(255.0, max(0.0, c + d))) for c, d in zip(color, offsets))  # type: ignore[return-value]


def _wave(y: float, amplitude: float, period: float, phase: float) -> list[Point]:
    xs = np.linspace(0, VIRTUAL_SIZE, 33)
    return [(x, y + amplitude * math.sin(2 * math.pi * x / period + phase)) for x in xs]


def _sky(pen: Pen, rng: np.random.Generator, color: RGB, max_height: float) -> float:
    horizon = rng.uniform(0.6 * max_height, max_height)
    pen.rect(0, 0, VIRTUAL_SIZE, horizon, _jitter(color, rng, 8))
    return horizon


def draw_street(pen: Pen, rng: np.random.Generator) -> None:
    grey = rng.uniform(95, 125)
    pen.rect(0, 0, VIRTUAL_SIZE, VIRTUAL_SIZE, (int(grey), int(grey), int(grey) + 6))
    curb = rng.uniform(8, 14)
    pen.rect(0, 0, VIRTUAL_SIZE, curb, _jitter((170, 165, 155), rng))
    pen.line([(0, curb), (VIRTUAL_SIZE, curb)], (215, 215, 205), 1.2)
    lane = rng.uniform(34, 52)
    phase = rng.uniform(0, 14)
    for x in np.arange(-14 + phase, VIRTUAL_SIZE, 14):
        pen.rect(x, lane, x + 8, lane + 1.6, (240, 240, 235))
    pen.line([(0, lane - 14), (VIRTUAL_SIZE, lane - 14)], (230, 200, 40), 1.0)


def draw_forest(pen: Pen, rng: np.random.Generator) -> None:
    pen.rect(0, 0, VIRTUAL_SIZE, VIRTUAL_SIZE, _jitter((35, 95, 40), rng))
    pen.rect(0, rng.uniform(50, 56), VIRTUAL_SIZE, VIRTUAL_SIZE, _jitter((75, 60, 30), rng))
    for x in rng.uniform(0, VIRTUAL_SIZE, rng.integers(5, 9)):
        width = rng.uniform(2, 4)
        pen.rect(x, 0, x + width, VIRTUAL_SIZE, _jitter((95, 62, 32), rng))
    for _ in range(12):  # foliage in the upper half
        (x, y), (rx, ry) = rng.uniform(0, 1, 2) * (VIRTUAL_SIZE, VIRTUAL_SIZE / 2), rng.uniform(4, 9, 2)
        pen.ellipse(x, y, rx, ry, _jitter((45, 130, 45), rng, 25))


def draw_sea(pen: Pen, rng: np.random.Generator) -> None:
    pen.rect(0, 0, VIRTUAL_SIZE, VIRTUAL_SIZE, _jitter((30, 80, 165), rng))
    horizon = _sky(pen, rng, (175, 210, 240), 18)
    for y in np.linspace(horizon + 4, VIRTUAL_SIZE - 2, rng.integers(6, 10)):
        pen.line(_wave(y, rng.uniform(0.8, 1.8), rng.uniform(10, 18), rng.uniform(0, 6.3)), (95, 150, 225), 0.9)


def draw_desert(pen: Pen, rng: np.random.Generator) -> None:
    pen.rect(0, 0, VIRTUAL_SIZE, VIRTUAL_SIZE, _jitter((228, 195, 130), rng))
    horizon = _sky(pen, rng, (195, 220, 240), 16)
    for y in np.linspace(horizon + 8, VIRTUAL_SIZE, 3):
        crest = _wave(y, rng.uniform(2, 4), rng.uniform(30, 60), rng.uniform(0, 6.3))
        pen.polygon(crest + [(VIRTUAL_SIZE, VIRTUAL_SIZE), (0, VIRTUAL_SIZE)], _jitter((205, 165, 100), rng, 8))
        pen.line(crest, (240, 215, 160), 0.8)


def draw_room(pen: Pen, rng: np.random.Generator) -> None:
    floor = rng.uniform(38, 46)
    pen.rect(0, 0, VIRTUAL_SIZE, floor, _jitter((225, 210, 180), rng))
    pen.rect(0, floor, VIRTUAL_SIZE, VIRTUAL_SIZE, _jitter((140, 95, 55), rng))
    for x in np.arange(rng.uniform(0, 9), VIRTUAL_SIZE + 20, 9):
        pen.line([(x, floor), (x - 8, VIRTUAL_SIZE)], (105, 68, 38), 0.7)
    pen.line([(0, floor), (VIRTUAL_SIZE, floor)], (90, 60, 35), 1.6)


def draw_snow(pen: Pen, rng: np.random.Generator) -> None:
    pen.rect(0, 0, VIRTUAL_SIZE, VIRTUAL_SIZE, _jitter((240, 244, 250), rng, 5))
    horizon = _sky(pen, rng, (185, 195, 215), 14)
    for y in np.linspace(horizon + 6, VIRTUAL_SIZE, 4):
        pen.line(_wave(y, rng.uniform(1, 3), rng.uniform(25, 50), rng.uniform(0, 6.3)), (200, 212, 235), 1.4)
    for x, y in rng.uniform(0, 1, (10, 2)) * (VIRTUAL_SIZE, horizon):
        pen.ellipse(x, y, 0.7, 0.7, WHITE)


# Keyed by the names used in the benchmark vocabulary (see ``synthetic_scenes``).
OBJECT_DRAWERS: dict[str, Callable[[Pen, RGB], None]] = {
    "car": draw_car,
    "bird": draw_bird,
    "boat": draw_boat,
    "airplane": draw_airplane,
    "fish": draw_fish,
    "house": draw_house,
}
COOBJECT_DRAWERS: dict[str, Callable[[Pen], None]] = {
    "traffic light": draw_traffic_light,
    "mushroom": draw_mushroom,
    "lighthouse": draw_lighthouse,
    "cactus": draw_cactus,
    "lamp": draw_lamp,
    "snowman": draw_snowman,
}
BACKGROUND_DRAWERS: dict[str, Callable[[Pen, np.random.Generator], None]] = {
    "street": draw_street,
    "forest": draw_forest,
    "sea": draw_sea,
    "desert": draw_desert,
    "room": draw_room,
    "snow": draw_snow,
}


@dataclass(frozen=True)
class SceneSpec:
    """What one image shows; the exact geometry is drawn from the rendering seed."""

    obj: str
    background: str
    coobject: str
    color: RGB
    half_size: float  # half the object's width on the virtual canvas
    tint: tuple[float, float, float]  # per-channel lighting factor


def _layout(spec: SceneSpec, rng: np.random.Generator) -> tuple[Placement, Placement]:
    """Object and co-object placements on opposite sides, so the co-object never covers the object."""
    half = spec.half_size + rng.uniform(-1, 1)
    reach = 1.1 * half  # the unit box rotated by <= 15 degrees stays within this radius per axis
    coobject_left = bool(rng.integers(2))
    co_x = COOBJECT_HALF + 2 if coobject_left else VIRTUAL_SIZE - COOBJECT_HALF - 2
    coobject = Placement(co_x, rng.uniform(COOBJECT_HALF + 3, VIRTUAL_SIZE - COOBJECT_HALF - 3), COOBJECT_HALF)
    free_x = (2 * COOBJECT_HALF + 4 + reach, VIRTUAL_SIZE - 1 - reach)
    if not coobject_left:
        free_x = (VIRTUAL_SIZE - free_x[1], VIRTUAL_SIZE - free_x[0])
    obj = Placement(
        cx=rng.uniform(*free_x),
        cy=rng.uniform(1 + reach, VIRTUAL_SIZE - 1 - reach),
        half=half,
        angle=math.radians(rng.uniform(-15, 15)),
        mirror=bool(rng.integers(2)),
    )
    return obj, coobject


def render_scene(spec: SceneSpec, image_size: int, seed: Sequence[int]) -> Image.Image:
    """Draw the scene deterministically from ``seed``; returns an RGB image of ``image_size`` pixels."""
    rng = np.random.default_rng(list(seed))
    canvas_size = image_size * SUPERSAMPLE
    canvas = Image.new("RGB", (canvas_size, canvas_size))
    pen = Pen(ImageDraw.Draw(canvas), canvas_size / VIRTUAL_SIZE)
    BACKGROUND_DRAWERS[spec.background](pen, rng)
    obj, coobject = _layout(spec, rng)
    COOBJECT_DRAWERS[spec.coobject](pen.at(coobject))
    OBJECT_DRAWERS[spec.obj](pen.at(obj), spec.color)
    pixels = np.asarray(canvas.resize((image_size, image_size), Image.Resampling.BOX), dtype=np.float32)
    pixels = pixels * np.asarray(spec.tint, dtype=np.float32) + rng.normal(0, PIXEL_NOISE_STD, pixels.shape)
    return Image.fromarray(np.clip(np.rint(pixels), 0, 255).astype(np.uint8))


def encode_png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=6)
    return buffer.getvalue()
