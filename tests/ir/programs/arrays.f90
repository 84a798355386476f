! Fortran program: arrays, do loops, bind(c) procedures, intrinsics and print.
module numerics
  use iso_c_binding
  implicit none
contains
  subroutine axpy(n, a, x, y) bind(c, name="axpy")
    integer(c_int), value :: n
    real(c_double), value :: a
    real(c_double), intent(in) :: x(n)
    real(c_double), intent(inout) :: y(n)
    integer :: i
    do i = 1, n
      y(i) = y(i) + a * x(i)
    end do
  end subroutine axpy

  function energy(n, m, u) result(e) bind(c, name="energy")
    integer(c_int), value :: n, m
    real(c_double), intent(in) :: u(n, m)
    real(c_double) :: e
    integer :: i, j
    e = 0.0d0
    do j = 1, m
      do i = 1, n
        if (u(i, j) > 100.0d0) exit
        e = e + 0.5d0 * u(i, j)**2 + sin(u(i, j))
      end do
    end do
  end function energy

  pure function norm2_custom(v) result(r)
    real(8), intent(in) :: v(:)
    real(8) :: r
    r = sqrt(sum(v * v))
  end function norm2_custom
end module numerics

program main
  use numerics
  implicit none
  real(8) :: x(10), y(10), grid(4, 5)
  real(8), allocatable :: z(:)
  integer :: k
  x = [(dble(k), k = 1, 10)]
  y = 2.0d0
  grid = reshape([(dble(k) * 0.1d0, k = 1, 20)], [4, 5])
  allocate(z(10))
  z = x * y
  call axpy(10, 3.0d0, x, y)
  select case (size(z))
  case (1:5)
    print *, 'small'
  case default
    print *, 'energy', energy(4, 5, grid), 'norm', norm2_custom(z), maxval(y)
  end select
  deallocate(z)
end program main
