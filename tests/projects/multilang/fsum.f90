function fsum_squares(x, n) bind(c, name="fsum_squares") result(s)
  use iso_c_binding
  implicit none
  integer(c_int), value :: n
  real(c_double), intent(in) :: x(n)
  real(c_double) :: s
  integer :: i
  s = 0.0d0
  do i = 1, n
    s = s + x(i) * x(i)
  end do
end function

subroutine fortran_greet() bind(c, name="fortran_greet")
  implicit none
  print '(A)', 'hello from fortran'
end subroutine
