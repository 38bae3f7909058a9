! SPDX-License-Identifier: MIT
! stream: Fortran unformatted stream output, arrays written whole, then at
! explicit positions (one past the end leaves a hole), then rewritten.
!
! usage: stream PATH
program stream
  implicit none
  integer, parameter :: n = 60000
  real(8) :: a(n)
  integer(4) :: k(n)
  integer :: i, u
  character(len=4096) :: path

  if (command_argument_count() /= 1) then
    write(0, '(a)') 'usage: stream PATH'
    stop 2
  end if
  call get_command_argument(1, path)
  do i = 1, n
    a(i) = sin(real(i, 8)) * 1000.0d0 + real(i, 8) / 7.0d0
    k(i) = i * 2654435 + 17
  end do

  open(newunit=u, file=trim(path), access='stream', form='unformatted', &
       status='replace', action='write')
  write(u) a
  write(u) k
  ! 480000 + 240000 bytes so far; pos= is 1-based: jump 100000 bytes past the end.
  write(u, pos=820001) a(1:20000)
  write(u, pos=1001) k(1:5000)
  close(u)

  open(newunit=u, file=trim(path), access='stream', form='unformatted', &
       status='old', action='readwrite', position='append')
  write(u) a(1:1000) * 2.0d0
  close(u)
end program stream
