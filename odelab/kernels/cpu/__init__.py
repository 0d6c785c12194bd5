"""CPU kernels: registrations (module paths only; see ``odelab.kernels``)."""
