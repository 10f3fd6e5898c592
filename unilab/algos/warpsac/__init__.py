"""WarpSAC: FlashSAC's networks and losses with the actor and temperature trained before the critic, and a
replay sampler biased by the age of the transitions."""
