"""The wire boundary: what every message must be, repairs the rules allow, transport failures explained."""
