"""Shape suites, in one place: every GPU and CPU test draws its sizes from here."""

# Sizes around warp, tile and power-of-two edges: 1 and 2 (degenerate), primes, 2^k +- 1, and a size that
# is a multiple of no tile.
EDGE_SIZES = (1, 2, 3, 17, 31, 32, 33, 63, 64, 65, 127, 129, 255, 257, 1000, 1024)

# Rectangular (M, N, K) with M != N != K, including skinny and K-dominant problems.
RECTANGULAR = (
    (7, 300, 129),
    (300, 7, 65),
    (129, 257, 1),
    (33, 65, 1000),
    (1000, 17, 31),
    (256, 96, 513),
    (1, 1024, 64),
    (1024, 1, 64),
)

DEGENERATE = ((0, 5, 7), (5, 0, 7), (5, 7, 0), (0, 0, 0))

# (alpha, beta) combinations: plain product, scaled with beta = 0 (C poisoned with NaN must not leak),
# and a full update.
ALPHA_BETA = ((1.0, 0.0), (-0.5, 0.0), (1.5, -0.75))


def edge_cubes():
    return [(s, s, s) for s in EDGE_SIZES]


def gpu_suite():
    """The shape suite every GPU kernel must pass."""
    return edge_cubes() + list(RECTANGULAR)
