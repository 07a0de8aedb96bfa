//! math placeholder
