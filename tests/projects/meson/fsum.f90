program fsum
  implicit none
  integer :: i
  real(8) :: s
  s = 0
  do i = 1, 10
    s = s + real(i, 8)**2
  end do
  print '(a, f8.1)', 'sum of squares = ', s
  if (abs(s - 385d0) > 1d-12) error stop 1
end program
