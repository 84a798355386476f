double energy(double x);
