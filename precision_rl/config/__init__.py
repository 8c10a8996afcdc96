"""What a run is: the experiment registry (YAML specs), precision arms, scales and algorithms."""
